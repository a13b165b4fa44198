// Measured memory read bandwidth of this host: the ceiling a memory-streaming kernel (decode's
// matmuls) can reach, so benchmark figures can be read as a fraction of it. A plain read loop
// with the widest loads the CPU has (AVX-512, else AVX2, else 64-bit) over a buffer far larger
// than the caches, a few passes, the best pass kept. Used by `ember bench`; not by inference.
#pragma once

#include <cstddef>
#include <cstdint>
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

namespace detail {
// The timed core, with the read loop given (tests): one thread per buffer, started together;
// the best pass's rate, total bytes over the time from the common start to the last thread's
// end, in GB/s. `held` (tests; nullptr in use) runs in each thread between the start and its
// read: a thread the host holds back there still counts its delay.
double read_together(const std::vector<const uint8_t*>& bufs, size_t bytes, int passes,
                     uint64_t (*read)(const uint8_t*, size_t), void (*held)(int thread));
}  // namespace detail

}  // namespace ember::tensor
