// Read-bandwidth probe (membw.h): each thread streams its own buffer with independent
// accumulators (no loop-carried dependency longer than one add), starting together at a
// barrier; the rate of a pass is total bytes over the time from that common start to the last
// thread's end.
#include "tensor/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor/weight_arena.h"

namespace ember::tensor {
namespace {

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 64));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 128));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 192));
  }
  alignas(64) uint64_t v[8];
  _mm512_store_si512(v, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  uint64_t s = 0;
  for (uint64_t x : v) s += x;
  return s;
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t v[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v),
                     _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  return v[0] + v[1] + v[2] + v[3];
}

uint64_t read_scalar(const uint8_t* p, size_t n) {
  uint64_t a[4] = {0, 0, 0, 0};
  for (size_t i = 0; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j) {
      uint64_t v;
      std::memcpy(&v, p + i + 8 * j, 8);
      a[j] += v;
    }
  }
  return a[0] + a[1] + a[2] + a[3];
}

using ReadFn = uint64_t (*)(const uint8_t*, size_t);

ReadFn read_fn() {
  if (simd::cpu_has_avx512_vnni()) return &read_avx512;
  if (simd::cpu_has_avx2()) return &read_avx2;
  return &read_scalar;
}

// In the memory decode reads its weights from (weight_arena.h: 2 MiB-aligned, huge pages where
// the kernel gives them), every page faulted in before timing.
struct Buffer {
  explicit Buffer(size_t n) : arena(WeightArena::create(n)) {
    p = arena ? arena->take(n) : nullptr;
    if (p != nullptr) std::memset(p, 1, n);
  }
  std::unique_ptr<WeightArena> arena;
  uint8_t* p = nullptr;
};

size_t round_bytes(int64_t bytes_per_thread) {
  return (static_cast<size_t>(std::max<int64_t>(bytes_per_thread, 1 << 20)) + 4095) & ~size_t{4095};
}

}  // namespace

namespace detail {

double read_together(const std::vector<const uint8_t*>& bufs, size_t bytes, int passes,
                     uint64_t (*read)(const uint8_t*, size_t), void (*held)(int thread)) {
  using Clock = std::chrono::steady_clock;
  const int threads = static_cast<int>(bufs.size());
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<Clock::time_point> end(static_cast<size_t>(threads));
    auto body = [&](int t) {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      if (held != nullptr) held(t);
      sink.fetch_add(read(bufs[static_cast<size_t>(t)], bytes), std::memory_order_relaxed);
      end[static_cast<size_t>(t)] = Clock::now();
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    while (ready.load() < threads - 1) std::this_thread::yield();
    // One window for all: from the common start to the last thread's end. Timing each thread
    // from its own start (as this probe once did) let a thread the hypervisor held back start
    // after the other had finished, and two back-to-back single-thread reads then counted as
    // up to twice the one-thread rate (docs/perf-notes.md, "Reading the bandwidth probe").
    const Clock::time_point start = Clock::now();
    go.store(true, std::memory_order_release);
    body(0);
    for (auto& th : pool) th.join();
    const double secs =
        std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) - start).count();
    if (secs > 0) best = std::max(best, static_cast<double>(bytes) * threads / secs / 1e9);
  }
  return best;
}

}  // namespace detail

struct BandwidthSampler::Impl {
  std::vector<std::unique_ptr<Buffer>> bufs;
  std::vector<const uint8_t*> ptrs;
  size_t bytes = 0;
};

BandwidthSampler::BandwidthSampler(int threads, int64_t bytes_per_thread)
    : impl_(std::make_unique<Impl>()) {
  impl_->bytes = round_bytes(bytes_per_thread);
  for (int t = 0; t < std::max(1, threads); ++t) {
    impl_->bufs.push_back(std::make_unique<Buffer>(impl_->bytes));
    if (impl_->bufs.back()->p == nullptr) {
      impl_->ptrs.clear();
      return;
    }
    impl_->ptrs.push_back(impl_->bufs.back()->p);
  }
}

BandwidthSampler::~BandwidthSampler() = default;

bool BandwidthSampler::ok() const {
  return !impl_->ptrs.empty();
}

double BandwidthSampler::sample(int passes) {
  if (!ok()) return 0;
  return detail::read_together(impl_->ptrs, impl_->bytes, passes, read_fn(), nullptr);
}

SampledRate combine_samples(std::span<const SampledStretch> stretches) {
  double seconds = 0, bytes = 0, probe_weighted = 0;
  for (const SampledStretch& s : stretches) {
    seconds += s.seconds;
    bytes += s.bytes;
    probe_weighted += s.seconds * (s.gbps_before + s.gbps_after) / 2;
  }
  SampledRate r;
  if (seconds <= 0) return r;
  r.gbps = bytes / seconds / 1e9;
  r.probe_gbps = probe_weighted / seconds;
  if (r.probe_gbps > 0) r.fraction = r.gbps / r.probe_gbps;
  return r;
}

ReadBandwidth measure_read_bandwidth(int threads, int64_t bytes_per_thread, int passes) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ReadBandwidth r;
  r.threads = threads;
  r.bytes_per_thread = static_cast<int64_t>(round_bytes(bytes_per_thread));
  r.single_gbps = BandwidthSampler(1, bytes_per_thread).sample(passes);
  r.all_gbps =
      threads == 1 ? r.single_gbps : BandwidthSampler(threads, bytes_per_thread).sample(passes);
  return r;
}

}  // namespace ember::tensor
