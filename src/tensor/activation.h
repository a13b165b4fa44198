// Activation kernels of the forward pass. GELU is computed as llama.cpp's CPU backend computes
// it: the input rounded to half precision indexes a 65536-entry table of half-precision
// results (inputs beyond +-10 pass through or give 0). Matching the reference's rounding
// matters on small quantized models, where a difference in the last bits of one activation
// can flip an 8-bit activation quantization downstream; it is also faster than evaluating
// expf per element. gelu_mul is dispatched through the SIMD level table (quant.h's
// set_simd_level reaches it); ref::gelu_mul is its scalar twin, and every level's result is
// bit-identical to it.
//
// SiLU (llama's and qwen3's FFN) is dispatched the same way. Its vector levels compute e^-x in
// double and round it once, which gives std::exp's float in all but a few inputs in 10,000, so
// they agree with the scalar twin ref::silu_mul bit for bit nearly always and within 2 ulp
// always. At decode it runs on the engine thread between two matmuls, where SmolLM2's 1,536
// libm expf calls per layer were most of the serial time before its down projection.
#pragma once

#include <cmath>
#include <cstdint>

namespace ember::tensor {

// GELU, tanh approximation (Gemma's gelu_pytorch_tanh), written as x * sigmoid(2u) since
// 0.5 * (1 + tanh(u)) == sigmoid(2u): one expf instead of a (slower) tanhf.
inline float gelu_tanh(float x) {
  constexpr float kTwoSqrt2OverPi = 2.f * 0.7978845608028654f;
  return x / (1.f + std::exp(-kTwoSqrt2OverPi * x * (1.f + 0.044715f * x * x)));
}

// SiLU, x * sigmoid(x).
inline float silu(float x) {
  return x / (1.f + std::exp(-x));
}

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

// gate[i] = gelu_table()(gate[i]) * up[i] for i < n.
void gelu_mul(float* gate, const float* up, int64_t n);

// gate[i] = silu(gate[i]) * up[i] for i < n.
void silu_mul(float* gate, const float* up, int64_t n);

namespace ref {
void gelu_mul(float* gate, const float* up, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n);
}  // namespace ref

}  // namespace ember::tensor
