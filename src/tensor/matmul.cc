// matmul: activations are quantized once per token row into the weight type's vec_dot_type, then
// output rows are split across the pool. Where the active SIMD level has GEMM tiles
// (gemm_tiles.h), a few weight rows are unpacked once and dotted against a few tokens at a time
// with the accumulators in registers; otherwise each weight row is dotted against every token.
// Either way a row is read from memory once per call whatever n_tokens is (decode is bound by
// streaming weights; prefill and batched decode reuse each row from cache).
#include "tensor/matmul.h"

#include <algorithm>
#include <vector>

#include "base/result.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {

void matmul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  EMBER_ASSERT(w.data != nullptr && w.rows > 0 && w.cols > 0 && n_tokens >= 1);
  EMBER_ASSERT(w.cols % block_elems(w.type) == 0);
  const DType at = vec_dot_type(w.type);
  const size_t w_row_bytes = row_bytes(w.type, w.cols);
  const size_t a_row_bytes = row_bytes(at, w.cols);
  const DotKernel dot = active_dot_kernel(w.type);

  // Reused across calls on this thread (the engine thread issues every matmul of a step).
  thread_local std::vector<uint8_t> act;
  if (act.size() < a_row_bytes * static_cast<size_t>(n_tokens)) {
    act.resize(a_row_bytes * static_cast<size_t>(n_tokens));
  }
  uint8_t* a = act.data();
  const int64_t cols = w.cols;
  if (n_tokens >= 4) {
    pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) quantize_row(at, x + t * cols, a + t * a_row_bytes, cols);
    });
  } else {
    for (int64_t t = 0; t < n_tokens; ++t)
      quantize_row(at, x + t * cols, a + t * a_row_bytes, cols);
  }

  const auto* wb = static_cast<const uint8_t*>(w.data);
  const int64_t rows = w.rows;
  const simd::GemmKernel g = active_gemm_kernel(w.type);
  if (g.tile == nullptr) {
    pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* wr = wb + static_cast<size_t>(r) * w_row_bytes;
        for (int64_t t = 0; t < n_tokens; ++t) {
          y[t * rows + r] = dot(cols, wr, a + t * a_row_bytes);
        }
      }
    });
    return;
  }
  constexpr int64_t kMinChunkBytes = 64 << 10;
  if (g.packed != nullptr && n_tokens >= g.pack_min_tokens) {
    // Blocks of g.pack_rows rows, unpacked once into this thread's scratch, then dotted against
    // every token (activations from L2, the packed rows from L1).
    const int64_t pr = g.pack_rows;
    const int64_t blocks = (rows + pr - 1) / pr;
    const size_t pb = g.pack_bytes(cols);
    const int64_t block_work = pr * static_cast<int64_t>(w_row_bytes) * n_tokens;
    const int64_t min_blocks =
        std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, block_work));
    pool.parallel_for(blocks, min_blocks, [&](int64_t i0, int64_t i1) {
      thread_local std::vector<uint8_t> packed;
      if (packed.size() < pb) packed.resize(pb);
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t r = i * pr;
        const int nr = static_cast<int>(std::min(pr, rows - r));
        g.pack(cols, wb + static_cast<size_t>(r) * w_row_bytes, w_row_bytes, nr, packed.data());
        g.packed(cols, packed.data(), nr, a, a_row_bytes, n_tokens, y + r,
                 static_cast<size_t>(rows));
      }
    });
    return;
  }
  if (n_tokens == 1 && g.decode_rows == 1 && g.rows != nullptr) {
    // One sequential stream per thread: whole runs of rows, one call per chunk.
    const int64_t min_rows = std::max<int64_t>(
        1, kMinChunkBytes / std::max<int64_t>(1, static_cast<int64_t>(w_row_bytes)));
    pool.parallel_for(rows, min_rows, [&](int64_t r0, int64_t r1) {
      g.rows(cols, wb + static_cast<size_t>(r0) * w_row_bytes, w_row_bytes, r1 - r0, a, y + r0);
    });
    return;
  }
  // Tiles of g.max_rows weight rows x g.max_tokens tokens; a thread takes whole row tiles and
  // runs every token tile over them, so its weight rows stay in L1 while the activations (a
  // few KB per token) come from L2.
  const int64_t mr = n_tokens == 1 ? g.decode_rows : g.max_rows, mt = g.max_tokens;
  const int64_t row_tiles = (rows + mr - 1) / mr;
  // A chunk streams at least kMinChunkBytes of weights (times tokens): handing a thread less
  // costs more in wake-up and cache traffic than it saves (a 640x256 Q8_0 decode matmul is
  // ~174 KB, a few microseconds).
  const int64_t tile_work = mr * static_cast<int64_t>(w_row_bytes) * n_tokens;
  const int64_t min_tiles = std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, tile_work));
  pool.parallel_for(row_tiles, min_tiles, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r = i * mr;
      const int nr = static_cast<int>(std::min(mr, rows - r));
      const uint8_t* wr = wb + static_cast<size_t>(r) * w_row_bytes;
      for (int64_t t = 0; t < n_tokens; t += mt) {
        const int nt = static_cast<int>(std::min(mt, n_tokens - t));
        g.tile(cols, wr, w_row_bytes, nr, a + t * a_row_bytes, a_row_bytes, nt, y + t * rows + r,
               static_cast<size_t>(rows));
      }
    }
  });
}

void get_row(const Matrix& w, int64_t row, float* out) {
  EMBER_ASSERT(row >= 0 && row < w.rows);
  const auto* wb = static_cast<const uint8_t*>(w.data);
  dequantize_row(w.type, wb + static_cast<size_t>(row) * row_bytes(w.type, w.cols), out, w.cols);
}

}  // namespace ember::tensor
