// The GELU table, the scalar gelu_mul and its dispatch; the AVX2 + F16C version (eight at a
// time: a half-precision conversion and a gather) is registered for the avx2 level here.
#include "tensor/activation.h"

#include <immintrin.h>

#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {

GeluTable::GeluTable() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = fp16_to_f32(static_cast<uint16_t>(h));
    // the result is stored at half precision, as the reference's table is
    table_[h] = fp16_to_f32(f32_to_fp16(gelu_tanh(x)));
  }
}

uint16_t GeluTable::half_bits(float x) {
  return f32_to_fp16(x);
}

const GeluTable& gelu_table() {
  static const GeluTable table;
  return table;
}

void ref::gelu_mul(float* gate, const float* up, int64_t n) {
  const GeluTable& gelu = gelu_table();
  for (int64_t i = 0; i < n; ++i) gate[i] = gelu(gate[i]) * up[i];
}

void gelu_mul(float* gate, const float* up, int64_t n) {
  active_gelu_mul()(gate, up, n);
}

namespace simd {
namespace {

// Round to nearest even, as f32_to_fp16 does; outside (-10, 10) the scalar rule's results.
__attribute__((target("avx2,f16c"))) void gelu_mul_avx2(float* gate, const float* up, int64_t n) {
  const float* table = gelu_table().data();
  const __m256 lo = _mm256_set1_ps(-10.f), hi = _mm256_set1_ps(10.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 g = _mm256_i32gather_ps(table, _mm256_cvtepu16_epi32(h), 4);
    g = _mm256_blendv_ps(g, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
    g = _mm256_blendv_ps(g, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
  }
  if (i < n) ref::gelu_mul(gate + i, up + i, n - i);
}

}  // namespace

void add_avx2_activations(KernelOverrides* o) {
  o->gelu_mul = &gelu_mul_avx2;
}

}  // namespace simd
}  // namespace ember::tensor
