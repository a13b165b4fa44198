// The GELU table, the scalar gelu_mul and silu_mul and their dispatch; the AVX2 versions
// (eight at a time: for GELU a half-precision conversion and a gather, for SiLU the vector exp)
// and the AVX-512 ones (sixteen, bit-identical to AVX2's) are registered for their levels here.
#include "tensor/activation.h"

#include <immintrin.h>

#include <iterator>

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

void ref::silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}

void silu_mul(float* gate, const float* up, int64_t n) {
  active_silu_mul()(gate, up, n);
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

// The vector exp's constants (both widths): 1 / ln 2; ln 2 in two parts, the first with
// trailing zero bits so that n * kLn2Hi is exact; and e^r's Taylor coefficients, highest first.
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
constexpr double kExpTaylor[] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
                                 1.0 / 5040,     1.0 / 720,     1.0 / 120,    1.0 / 24,
                                 1.0 / 6,        1.0 / 2,       1.0,          1.0};

// e^x in four double lanes for |x| <= 104: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts,
// so n ln2 is exact), e^r by its Taylor series to degree 11 (truncation below 1e-13
// relative), 2^n through the exponent bits.
__attribute__((target("avx2,fma"))) inline __m256d exp_f64x4(__m256d x) {
  const __m256d n = _mm256_round_pd(_mm256_mul_pd(x, _mm256_set1_pd(kLog2e)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Hi), x);
  r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Lo), r);
  __m256d p = _mm256_set1_pd(kExpTaylor[0]);
  for (size_t k = 1; k < std::size(kExpTaylor); ++k) {
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kExpTaylor[k]));
  }
  const __m256i e = _mm256_slli_epi64(
      _mm256_add_epi64(_mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n)), _mm256_set1_epi64x(1023)), 52);
  return _mm256_mul_pd(p, _mm256_castsi256_pd(e));
}

// x / (1 + e^-x), the scalar formula, with e^-x computed in double and rounded once to float:
// that is std::exp's float result in all but a few inputs in 10,000 (the test bounds how many
// and by how much), so the vector levels round SiLU as the scalar twin does. (A float
// polynomial exp, 2e-7 relative, changed a third of the results by up to 4 ulp, and the
// llama_q4_k fixture's golden parity with llama.cpp failed: a random-weight model turns a
// flipped 8-bit activation rounding into a 0.2 log-probability change.) -x is clamped to
// [-104, 89]: beyond those e^-x is 0 or infinite in float either way.
__attribute__((target("avx2,fma"))) inline void silu_mul_8(float* gate, const float* up) {
  const __m256 x = _mm256_loadu_ps(gate);
  // max/min return their second operand for NaN: x's NaN still reaches the quotient.
  const __m256 nx =
      _mm256_min_ps(_mm256_max_ps(_mm256_sub_ps(_mm256_setzero_ps(), x), _mm256_set1_ps(-104.f)),
                    _mm256_set1_ps(89.f));
  const __m128 e_lo = _mm256_cvtpd_ps(exp_f64x4(_mm256_cvtps_pd(_mm256_castps256_ps128(nx))));
  const __m128 e_hi = _mm256_cvtpd_ps(exp_f64x4(_mm256_cvtps_pd(_mm256_extractf128_ps(nx, 1))));
  const __m256 e = _mm256_insertf128_ps(_mm256_castps128_ps256(e_lo), e_hi, 1);
  const __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
  _mm256_storeu_ps(gate, _mm256_mul_ps(s, _mm256_loadu_ps(up)));
}

__attribute__((target("avx2,fma"))) void silu_mul_avx2(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) silu_mul_8(gate + i, up + i);
  if (i < n) ref::silu_mul(gate + i, up + i, n - i);
}

// ---- AVX-512: the same operations per element, sixteen at a time ----
// Each lane computes what the AVX2 versions compute (the same double exp, the same rounding, the
// same table), so the two levels give the same bits; tails shorter than 16 go through the AVX2
// versions.

#define EMBER_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw,avx2,fma,f16c")))
// GCC 12's _mm512_undefined_* (self-initialised locals inside several 512-bit intrinsics) trip
// -Wmaybe-uninitialized once inlined: a known false positive (as in quant_avx512.cc).
#if !defined(__clang__)  // which has no -Wmaybe-uninitialized (and no such false positive)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

EMBER_AVX512 void gelu_mul_avx512(float* gate, const float* up, int64_t n) {
  const float* table = gelu_table().data();
  const __m512 lo = _mm512_set1_ps(-10.f), hi = _mm512_set1_ps(10.f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(gate + i);
    const __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 g = _mm512_i32gather_ps(_mm512_cvtepu16_epi32(h), table, 4);
    g = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), g, x);
    g = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LE_OQ), g, _mm512_setzero_ps());
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(g, _mm512_loadu_ps(up + i)));
  }
  if (i < n) gelu_mul_avx2(gate + i, up + i, n - i);
}

// exp_f64x4's steps on eight lanes.
EMBER_AVX512 inline __m512d exp_f64x8(__m512d x) {
  const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(x, _mm512_set1_pd(kLog2e)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Hi), x);
  r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Lo), r);
  __m512d p = _mm512_set1_pd(kExpTaylor[0]);
  for (size_t k = 1; k < std::size(kExpTaylor); ++k) {
    p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kExpTaylor[k]));
  }
  const __m512i e =
      _mm512_slli_epi64(_mm512_add_epi64(_mm512_cvtpd_epi64(n), _mm512_set1_epi64(1023)), 52);
  return _mm512_mul_pd(p, _mm512_castsi512_pd(e));
}

EMBER_AVX512 void silu_mul_avx512(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(gate + i);
    const __m512 nx =
        _mm512_min_ps(_mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), _mm512_set1_ps(-104.f)),
                      _mm512_set1_ps(89.f));
    const __m256 e_lo = _mm512_cvtpd_ps(exp_f64x8(_mm512_cvtps_pd(_mm512_castps512_ps256(nx))));
    const __m256 e_hi = _mm512_cvtpd_ps(exp_f64x8(_mm512_cvtps_pd(_mm512_extractf32x8_ps(nx, 1))));
    const __m512 e = _mm512_insertf32x8(_mm512_castps256_ps512(e_lo), e_hi, 1);
    const __m512 s = _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.f), e));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(s, _mm512_loadu_ps(up + i)));
  }
  if (i < n) silu_mul_avx2(gate + i, up + i, n - i);
}

#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef EMBER_AVX512

}  // namespace

void add_avx2_activations(KernelOverrides* o) {
  o->gelu_mul = &gelu_mul_avx2;
  o->silu_mul = &silu_mul_avx2;
}

void add_avx512_activations(KernelOverrides* o) {
  o->gelu_mul = &gelu_mul_avx512;
  o->silu_mul = &silu_mul_avx512;
}

}  // namespace simd
}  // namespace ember::tensor
