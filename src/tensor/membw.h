// Measured memory read bandwidth of this host: the ceiling a memory-streaming kernel (decode's
// matmuls) can reach, so benchmark figures can be read as a fraction of it. A plain read loop
// with the widest loads the CPU has (AVX-512, else AVX2, else 64-bit) over a buffer far larger
// than the caches, a few passes, the best pass kept. Used by `ember bench`; not by inference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace ember::tensor {

struct ReadBandwidth {
  double single_gbps = 0;  // one thread
  double all_gbps = 0;     // `threads` threads at once, each over its own buffer
  int threads = 0;
  int64_t bytes_per_thread = 0;
};

// threads <= 0: all cores. bytes_per_thread: buffer each thread reads (rounded to 4 KiB).
ReadBandwidth measure_read_bandwidth(int threads, int64_t bytes_per_thread = 256 << 20,
                                     int passes = 5);

// The host's bandwidth sampled around pieces of other work, for a work rate read against the
// bandwidth the host gave while that work ran rather than against a best pass taken apart from
// it. On a shared VM the two-thread rate can double for a few hundred milliseconds when the
// neighbours go quiet (docs/perf-notes.md, "Reading the bandwidth probe"); a best-of-five
// probe catches such a window whenever one of its passes falls in it, while a 128-token
// decode beside it may not.
// Buffers are allocated and faulted in once; each sample() is the best of `passes` passes (one by
// default: no best-of) of every thread at once over its own buffer, in GB/s, a pass timed from
// the threads' common start to the last one's end (measure_read_bandwidth is two of these).
class BandwidthSampler {
 public:
  explicit BandwidthSampler(int threads, int64_t bytes_per_thread = 64 << 20);
  ~BandwidthSampler();
  BandwidthSampler(const BandwidthSampler&) = delete;
  BandwidthSampler& operator=(const BandwidthSampler&) = delete;
  bool ok() const;  // false: no memory for the buffers (sample() then reads 0)
  double sample(int passes = 1);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A stretch of work with the bandwidth samples taken just before and just after it.
struct SampledStretch {
  double seconds = 0;
  double bytes = 0;  // read by the work in the stretch
  double gbps_before = 0, gbps_after = 0;
};

struct SampledRate {
  double gbps = 0;        // the work's bytes over its time, all stretches together
  double probe_gbps = 0;  // each stretch's two samples averaged, weighted by its time
  double fraction = 0;    // gbps / probe_gbps (0 without samples)
};

SampledRate combine_samples(std::span<const SampledStretch> stretches);

namespace detail {
// The timed core, with the read loop given (tests): one thread per buffer, started together;
// the best pass's rate, total bytes over the time from the common start to the last thread's
// end, in GB/s. `held` (tests; nullptr in use) runs in each thread between the start and its
// read: a thread the host holds back there still counts its delay.
double read_together(const std::vector<const uint8_t*>& bufs, size_t bytes, int passes,
                     uint64_t (*read)(const uint8_t*, size_t), void (*held)(int thread));
}  // namespace detail

}  // namespace ember::tensor
