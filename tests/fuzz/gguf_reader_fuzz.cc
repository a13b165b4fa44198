// Fuzz target: the GGUF reader (and the tokenizer metadata read through it). Any byte string
// must open cleanly or fail with an Error; nothing may read outside the mapping.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "gguf/reader.h"
#include "text/tokenizer.h"
#include "text/vocab.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = ::memfd_create("gguf_fuzz", 0);
  if (fd < 0) return 0;
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, data, size, 0) != ssize_t(size)) return 0;
  auto f = ember::gguf::File::open("/proc/self/fd/" + std::to_string(fd));
  if (!f.ok()) return 0;
  (void)ember::gguf::describe(*f);
  for (const auto& [key, v] : f->metadata()) {
    (void)f->get_string(key);
    (void)f->get_int(key);
    (void)f->get_float_array(key);
    (void)f->get_string_array(key);
  }
  auto vocab = ember::text::load_vocab(*f);
  if (vocab.ok()) {
    auto tok = ember::text::Tokenizer::create(std::move(*vocab));
    if (tok.ok()) (void)(*tok)->encode("hello world", true, true);
  }
  return 0;
}
