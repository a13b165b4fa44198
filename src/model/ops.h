// Element-wise pieces of the forward pass (norms, activations, rotary embeddings). Plain loops
// the compiler vectorizes; the matmuls, not these, dominate a step.
#pragma once

#include <cmath>
#include <cstdint>

namespace ember::model::ops {

// out[i] = x[i] / rms(x) * w[i]; out may alias x. The sum runs in double, as ggml's does.
inline void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
}

inline float silu(float x) {
  return x / (1.f + std::exp(-x));
}

// GELU, tanh approximation (Gemma's gelu_pytorch_tanh), written as x * sigmoid(2u) since
// 0.5 * (1 + tanh(u)) == sigmoid(2u): one expf instead of a (slower) tanhf.
inline float gelu_tanh(float x) {
  constexpr float kTwoSqrt2OverPi = 2.f * 0.7978845608028654f;
  return x / (1.f + std::exp(-kTwoSqrt2OverPi * x * (1.f + 0.044715f * x * x)));
}

// GELU as llama.cpp's CPU backend computes it: the input rounded to half precision indexes a
// 65536-entry table of half-precision results (inputs beyond +-10 pass through or give 0).
// Matching the reference's rounding matters on small quantized models, where a difference in
// the last bits of one activation can flip an 8-bit activation quantization downstream; it
// is also faster than evaluating expf per element.
class GeluTable {
 public:
  GeluTable();
  float operator()(float x) const {
    if (x <= -10.f) return 0.f;
    if (x >= 10.f) return x;
    return table_[half_bits(x)];
  }
  // The 65536 results, indexed by the input's half-precision bits.
  const float* data() const { return table_; }

 private:
  static uint16_t half_bits(float x);
  float table_[65536];
};
const GeluTable& gelu_table();

// gate[i] = gelu_table()(gate[i]) * up[i] for i < n: the same values, eight at a time (F16C
// conversion + a gather) where the CPU has AVX2.
void gelu_mul(float* gate, const float* up, int64_t n);

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

}  // namespace ember::model::ops
