// Matrix products over quantized weights.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/thread_pool.h"

namespace ember::tensor {

// A weight matrix W of shape [rows][cols] (GGUF dims {cols, rows}); each row is row_bytes(type,
// cols) bytes, contiguous.
struct Matrix {
  DType type = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
};

// y[t][r] = sum_c W[r][c] * x[t][c] for t < n_tokens.
// x: [n_tokens][cols] floats; y: [n_tokens][rows] floats. Activations are quantized once to
// vec_dot_type(W.type), then rows are split across the pool.
void matmul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool);

// Copies row `row` of W, dequantized, into out[cols] (embedding lookup).
void get_row(const Matrix& w, int64_t row, float* out);

}  // namespace ember::tensor
