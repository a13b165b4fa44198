// e^x for x <= 0 in 8 AVX2 lanes: the softmax of the attention kernel (attention_avx2.cc), where
// the arguments are scores minus their maximum. x = n ln2 + r with |r| <= ln2 / 2, e^r by a
// degree-6 polynomial (Cephes' expf coefficients), times 2^n through the exponent bits; relative
// error within 2e-7 of std::exp (tests/tensor/attention_test.cc checks it over [-87, 0]). Below
// -87.3 it returns e^-87.3 (about 1e-38), which adds nothing to a softmax sum holding e^0 = 1.
#pragma once

#include <immintrin.h>

namespace ember::tensor::simd {

__attribute__((target("avx2,fma"))) inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

// exp_nonpositive over x[0, n) into y (n % 8 == 0), for tests.
__attribute__((target("avx2,fma"))) inline void exp_nonpositive_n(const float* x, float* y, int n) {
  for (int i = 0; i < n; i += 8) _mm256_storeu_ps(y + i, exp_nonpositive(_mm256_loadu_ps(x + i)));
}

}  // namespace ember::tensor::simd
