// Fuzz target: the warm-state file reader (engine/warm_cache.h). Any byte string must load
// cleanly or be refused with an Error; nothing may read outside the file or crash, and a
// refused file must leave the cache empty (all-or-nothing). The seed corpus holds a valid file
// written by save_warm_file for the fake backend used here.
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/fake_backend.h"
#include "engine/prefix_cache.h"
#include "engine/warm_cache.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember::engine;
  static const int fd = ::memfd_create("warm_fuzz", 0);
  if (fd < 0) return 0;
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size)) return 0;
  testing::FakeBackend backend({.block_tokens = 4});
  PrefixCache cache(backend.kv_layout(), 1 << 20);
  auto r = load_warm_file("/proc/self/fd/" + std::to_string(fd), backend, cache,
                          std::chrono::steady_clock::now() + std::chrono::seconds(10));
  if (!r.ok() && cache.stats().blocks != 0) std::abort();  // a refused file loaded something
  return 0;
}
