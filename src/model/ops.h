// Element-wise pieces of the forward pass (rotary embeddings, biases). Plain loops the compiler
// vectorizes; the matmuls, not these, dominate a step. The norm, GELU, SiLU and attention
// kernels live in tensor/ (norm.h, activation.h, attention.h) with the other SIMD kernels.
#pragma once

#include <cmath>
#include <cstdint>

namespace ember::model::ops {

// Rotates one head in place. cs/sn: [rope_dim / 2] cos and sin of each pair's angle.
// neox: pairs are (i, i + rope_dim/2); otherwise (2i, 2i+1). Dimensions past rope_dim stay.
inline void rope_head(float* x, const float* cs, const float* sn, int32_t rope_dim, bool neox) {
  const int32_t half = rope_dim / 2;
  if (neox) {
    for (int32_t i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * cs[i] - b * sn[i];
      x[i + half] = a * sn[i] + b * cs[i];
    }
  } else {
    for (int32_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * cs[i] - b * sn[i];
      x[2 * i + 1] = a * sn[i] + b * cs[i];
    }
  }
}

// x[i] += b[i]: a bias (qwen2's Q, K and V; an output bias).
inline void add(float* x, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += b[i];
}

}  // namespace ember::model::ops
