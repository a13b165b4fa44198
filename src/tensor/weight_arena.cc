#include "tensor/weight_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace ember::tensor {

namespace {
constexpr size_t kHuge = size_t{2} << 20;
}

std::unique_ptr<WeightArena> WeightArena::create(size_t bytes) {
  const size_t size = (bytes + kHuge - 1) & ~(kHuge - 1);
  if (size == 0) return nullptr;
  const size_t map_size = size + kHuge;  // slack to align the start to 2 MiB
  void* m = ::mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  auto* map = static_cast<uint8_t*>(m);
  auto* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(map) + kHuge - 1) &
                                          ~uintptr_t{kHuge - 1});
  ::madvise(base, size, MADV_HUGEPAGE);  // advisory: without THP it is plain memory
  return std::unique_ptr<WeightArena>(new WeightArena(map, map_size, base, size));
}

WeightArena::~WeightArena() {
  ::munmap(map_, map_size_);
}

uint8_t* WeightArena::take(size_t n) {
  const size_t at = (used_ + 63) & ~size_t{63};
  if (at + n > size_) return nullptr;
  used_ = at + n;
  return base_ + at;
}

const uint8_t* WeightArena::add(const void* src, size_t n, bool release_source) {
  uint8_t* to = take(n);
  if (to == nullptr) return nullptr;
  constexpr size_t kChunk = size_t{4} << 20;
  const auto* s = static_cast<const uint8_t*>(src);
  for (size_t off = 0; off < n; off += kChunk) {
    const size_t len = std::min(kChunk, n - off);
    std::memcpy(to + off, s + off, len);
    if (release_source) release_pages(s + off, len);
  }
  return to;
}

void release_pages(const void* p, size_t n) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (b + page - 1) & ~(page - 1), hi = (b + n) & ~(page - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace ember::tensor
