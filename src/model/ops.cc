#include "model/ops.h"

#include "tensor/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember::model::ops {

GeluTable::GeluTable() {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float x = tensor::fp16_to_f32(static_cast<uint16_t>(h));
    // the result is stored at half precision, as the reference's table is
    table_[h] = tensor::fp16_to_f32(tensor::f32_to_fp16(gelu_tanh(x)));
  }
}

uint16_t GeluTable::half_bits(float x) {
  return tensor::f32_to_fp16(x);
}

const GeluTable& gelu_table() {
  static const GeluTable table;
  return table;
}

#if defined(__x86_64__) && defined(__GNUC__)
namespace {
bool cpu_has_avx2_f16c() {
#if defined(__clang__)  // clang 16 knows no "f16c" here; every AVX2 CPU has F16C
  static const bool has = __builtin_cpu_supports("avx2");
#else
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#endif
  return has;
}

// Round to nearest even, as f32_to_fp16 does; outside (-10, 10) the scalar rule's results.
__attribute__((target("avx2,f16c"))) int64_t gelu_mul_avx2(const float* table, float* gate,
                                                           const float* up, int64_t n) {
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
  return i;
}
}  // namespace
#endif

void gelu_mul(float* gate, const float* up, int64_t n) {
  const GeluTable& gelu = gelu_table();
  int64_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (cpu_has_avx2_f16c()) i = gelu_mul_avx2(gelu.data(), gate, up, n);
#endif
  for (; i < n; ++i) gate[i] = gelu(gate[i]) * up[i];
}

}  // namespace ember::model::ops
