// Measured memory read bandwidth of this host: the ceiling a memory-streaming kernel (decode's
// matmuls) can reach, so benchmark figures can be read as a fraction of it. A plain read loop
// with the widest loads the CPU has (AVX-512, else AVX2, else 64-bit) over a buffer far larger
// than the caches, a few passes, the best pass kept. Used by `ember bench`; not by inference.
#pragma once

#include <cstdint>

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

}  // namespace ember::tensor
