// RMS normalization, out[i] = x[i] * s * w[i] with s = 1 / sqrt(mean(x^2) + eps) (llama's,
// qwen3's and gemma3's norms; gemma3's weights arrive with its +1 already folded in).
//
// The sum of squares runs in double, as ggml's does, over eight lanes: element i goes to lane
// i % 8, each lane adds in index order, and the lanes are then added
// ((0 + 4) + (2 + 6)) + ((1 + 5) + (3 + 7)). Squares of floats are exact in double, so that
// order fixes every rounding: each level's result is bit-identical to the scalar twin
// ref::rms_norm. It is dispatched through the SIMD level table (quant.h's set_simd_level
// reaches it). At decode the engine thread runs it alone between two matmuls, two to four
// times a layer; one chain of scalar double additions took ~1 us for a 576-wide row there.
#pragma once

#include <cstdint>

namespace ember::tensor {

// out may alias x (the same pointer); w holds n weights.
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);

namespace ref {
void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps);
}  // namespace ref

}  // namespace ember::tensor
