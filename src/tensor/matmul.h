// Matrix products over quantized weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "tensor/dtype.h"
#include "tensor/thread_pool.h"

namespace ember::tensor {

// A weight matrix W of shape [rows][cols] (GGUF dims {cols, rows}); each row is row_bytes(type,
// cols) bytes, contiguous, or, with interleave = L > 0, the same bytes in groups of L rows
// (tensor/interleave.h).
struct Matrix {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  int32_t interleave = 0;
};

// y[t][r] = sum_c W[r][c] * x[t][c] for t < n_tokens.
// x: [n_tokens][cols] floats; y: [n_tokens][rows] floats. Activations are quantized once to
// vec_dot_type(W.type), then rows are split across the pool.
void matmul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Several products of the same activations in one job: outs[i].y = outs[i].w x, every w with
// the same cols. Each y is exactly what matmul(*outs[i].w, x, n_tokens, outs[i].y, pool) gives;
// the activations are quantized once per vec_dot_type and the pool is handed the rows of all
// the matrices at once (one wake-up and one wait instead of one per matrix).
struct MatmulOut {
  const Matrix* w;
  float* y;  // [n_tokens][w->rows]
};
inline constexpr size_t kMaxMatmulOuts = 4;
void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens, ThreadPool& pool);

// The fused form, for matrices with the same number of rows, then then(r0, r1) on every range of
// output rows once every y holds it (rows [r0, r1) of each token's row in each y): element-wise
// work that follows the products (a layer's FFN activation over its gate and up) runs in the
// same hand-off, on the thread that computed the rows, while they are in its cache, and not
// alone on the caller after it. Ranges are disjoint, cover every row once, and start at
// multiples of kRowsAlign, so a kernel that works in vectors of up to kRowsAlign floats splits a
// range as it would the whole row. When the products' kernels cut rows into different units
// (types or layouts that differ), the products run as above and the ranges follow in a second
// hand-off.
using RowsFn = std::function<void(int64_t r0, int64_t r1)>;
inline constexpr int64_t kRowsAlign = 16;
void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens, ThreadPool& pool,
            const RowsFn& then);

// Copies row `row` of W, dequantized, into out[cols] (embedding lookup).
void get_row(const Matrix& w, int64_t row, float* out);

}  // namespace ember::tensor
