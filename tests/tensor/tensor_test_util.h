// Helpers shared by the tensor tests: deterministic random data and type lists.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant.h"

namespace ember::tensor::testing {

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = dist(rng);
  return v;
}

inline std::vector<uint8_t> quantized(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  ref::quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

inline std::vector<float> dequantized(DType t, const void* q, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  ref::dequantize_row(t, q, out.data(), n);
  return out;
}

// The alignment rows of t have in real data (GGUF aligns tensor data, and every block size keeps
// the next block aligned): 4 bytes for F32 and Q8_K (float fields), 2 for the others. Kernels
// may assume it (element loads); they must not assume more (vector loads are unaligned).
inline size_t natural_alignment(DType t) {
  return t == DType::F32 || t == DType::Q8_K ? 4 : 2;
}

// Weight types with a vec_dot kernel.
inline const std::vector<DType>& weight_types() {
  static const std::vector<DType> v = {
      DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
      DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return v;
}

// Puts the best SIMD level back when a test that switches levels ends (or fails).
class RestoreBestLevel {
 public:
  RestoreBestLevel() = default;
  RestoreBestLevel(const RestoreBestLevel&) = delete;
  RestoreBestLevel& operator=(const RestoreBestLevel&) = delete;
  ~RestoreBestLevel() { set_simd_enabled(true); }
};

}  // namespace ember::tensor::testing
