// matmul: activations are quantized once per token row into the weight type's vec_dot_type, then
// output rows are split across the pool. Each weight row is dotted against every token row
// before moving on, so a row is read from memory once per call whatever n_tokens is (decode is
// bound by streaming weights; prefill and batched decode reuse each row from cache).
#include "tensor/matmul.h"

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
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = wb + static_cast<size_t>(r) * w_row_bytes;
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * rows + r] = dot(cols, wr, a + t * a_row_bytes);
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
