// Matrix products over quantized weights.
#pragma once

#include <cstddef>
#include <cstdint>
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

// Copies row `row` of W, dequantized, into out[cols] (embedding lookup).
void get_row(const Matrix& w, int64_t row, float* out);

}  // namespace ember::tensor
