// AVX2 (+FMA, F16C) activation quantizers, compiled with per-function target attributes and
// chosen at run time, so the binary still runs on CPUs without them; they produce blocks
// bit-identical to the scalar references in quant_ref_*.cc. The AVX2 dot products are the GEMM
// tiles of gemm_avx2.cc, vec_dot included (its 1 x 1 tile), so that vec_dot and matmul agree
// bit for bit whatever the number of tokens in a call.
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

#define EMBER_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace ember::tensor::simd {
namespace {

EMBER_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// ---- activation quantizers (bit-identical to the references) ----

EMBER_AVX2 inline __m256 abs_ps(__m256 v) {
  return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

// std::round (ties away from zero) on values of magnitude < 2^22.
EMBER_AVX2 inline __m256 round_away(__m256 v) {
  const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 tie = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, r)), _mm256_set1_ps(0.5f), _CMP_EQ_OQ);
  const __m256 half = _mm256_or_ps(_mm256_set1_ps(0.5f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
  return _mm256_blendv_ps(r, _mm256_add_ps(v, half), tie);
}

// 32 int32 (four vectors, in order) -> 32 int8 in order, saturating.
EMBER_AVX2 inline __m256i pack_32(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);  // lanes: a0 b0 | a1 b1
  const __m256i cd = _mm256_packs_epi32(c, d);
  const __m256i all = _mm256_packs_epi16(ab, cd);  // a0 b0 c0 d0 | a1 b1 c1 d1
  return _mm256_permutevar8x32_epi32(all, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// One 32-float block as the reference quantizes it: the scale d = amax / 127 and the levels
// round(x / d) (ties away from zero) as int32 lanes.
EMBER_AVX2 inline float quant_block_32(const float* x, __m256i (&q)[4]) {
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k), m = _mm256_max_ps(m, abs_ps(v[k]));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127;
  const float id = d ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_away(_mm256_mul_ps(v[k], vid)));
  return d;
}

// Lane k = the largest of m[k]'s 8 lanes (max is exact, so any order gives the same value).
EMBER_AVX2 inline __m256 lane_max8(const __m256 (&m)[8]) {
  __m256 t[4];
  for (int i = 0; i < 4; ++i) {  // per 128-bit half: m[2i] 01, 23, m[2i+1] 01, 23
    t[i] = _mm256_max_ps(_mm256_shuffle_ps(m[2 * i], m[2 * i + 1], 0x88),
                         _mm256_shuffle_ps(m[2 * i], m[2 * i + 1], 0xDD));
  }
  // u0: m0..m3 of each half; u1: m4..m7.
  const __m256 u0 =
      _mm256_max_ps(_mm256_shuffle_ps(t[0], t[1], 0x88), _mm256_shuffle_ps(t[0], t[1], 0xDD));
  const __m256 u1 =
      _mm256_max_ps(_mm256_shuffle_ps(t[2], t[3], 0x88), _mm256_shuffle_ps(t[2], t[3], 0xDD));
  return _mm256_max_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// Lane k = the sum of v[k]'s 8 int32 lanes (exact).
EMBER_AVX2 inline __m256i lane_sum8(const __m256i (&v)[8]) {
  const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
  const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// 8 consecutive blocks of 32 floats at once, as the reference quantizes each (quant_block_32):
// the block maxima, d = amax / 127, 1 / d and the fp16 conversions (F16C, rounding to nearest
// even as float_to_half does) run as one vector for the 8 blocks instead of one serial chain
// per block (two divisions and two software conversions each), which was most of the
// quantizer's time. Returns d (8 lanes) and, in sums, each block's sum of levels (Q8_1).
EMBER_AVX2 inline __m256 quant_8_blocks(const float* x, __m256i (&q8)[8], __m256i* sums) {
  __m256 m[8];
  for (int b = 0; b < 8; ++b) {
    m[b] = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      m[b] = _mm256_max_ps(m[b], abs_ps(_mm256_loadu_ps(x + 32 * b + 8 * k)));
    }
  }
  const __m256 d = _mm256_div_ps(lane_max8(m), _mm256_set1_ps(127.0f));
  const __m256 id = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), d),
                                  _mm256_cmp_ps(d, _mm256_setzero_ps(), _CMP_NEQ_OQ));
  __m256i s[8];
  for (int b = 0; b < 8; ++b) {
    const __m256 vid = _mm256_permutevar8x32_ps(id, _mm256_set1_epi32(b));
    __m256i q[4];
    for (int k = 0; k < 4; ++k) {
      q[k] =
          _mm256_cvtps_epi32(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * b + 8 * k), vid)));
    }
    q8[b] = pack_32(q[0], q[1], q[2], q[3]);
    s[b] = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
  }
  if (sums != nullptr) *sums = lane_sum8(s);
  return d;
}

EMBER_AVX2 void quant_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8, x += 8 * kQK) {
    __m256i q8[8];
    alignas(16) uint16_t dh[8];
    const __m256 d = quant_8_blocks(x, q8, nullptr);
    _mm_store_si128(reinterpret_cast<__m128i*>(dh), _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
    for (int b = 0; b < 8; ++b) {
      y[i + b].d = dh[b];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i + b].qs), q8[b]);
    }
  }
  for (; i < nb; ++i, x += kQK) {
    __m256i q[4];
    y[i].d = float_to_half(quant_block_32(x, q));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), pack_32(q[0], q[1], q[2], q[3]));
  }
}

// Q8_1 (activations of Q4_1 / Q5_1): Q8_0's levels plus s = d * sum(levels); the levels are in
// [-127, 127], so their int32 sum is exact and packing does not saturate.
EMBER_AVX2 void quant_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  const int64_t nb = n / kQK;
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8, x += 8 * kQK) {
    __m256i q8[8], sums;
    alignas(16) uint16_t dh[8], sh[8];
    const __m256 d = quant_8_blocks(x, q8, &sums);
    _mm_store_si128(reinterpret_cast<__m128i*>(dh), _mm256_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
    _mm_store_si128(
        reinterpret_cast<__m128i*>(sh),
        _mm256_cvtps_ph(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), d), _MM_FROUND_TO_NEAREST_INT));
    for (int b = 0; b < 8; ++b) {
      y[i + b].d = dh[b];
      y[i + b].s = sh[b];
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i + b].qs), q8[b]);
    }
  }
  for (; i < nb; ++i, x += kQK) {
    __m256i q[4];
    const float d = quant_block_32(x, q);
    y[i].d = float_to_half(d);
    const int sum =
        hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    y[i].s = float_to_half(static_cast<float>(sum) * d);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), pack_32(q[0], q[1], q[2], q[3]));
  }
}

EMBER_AVX2 void quant_q8_k(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i, x += kQKK) {
    // The signed value of largest magnitude (first one on ties, like the reference).
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < kQKK; k += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + k)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    if (amax == 0) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0;
    for (int k = 0; k < kQKK; ++k) {
      if (std::fabs(x[k]) == amax) {
        max = x[k];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vis = _mm256_set1_ps(iscale);
    for (int k = 0; k < kQKK; k += 32) {
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + k + 8 * j), vis));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + k), pack_32(q[0], q[1], q[2], q[3]));
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(y[i].qs + 16 * j));
      const __m256i w16 = _mm256_cvtepi8_epi16(b);
      y[i].bsums[j] = static_cast<int16_t>(hsum_i32(_mm256_madd_epi16(w16, _mm256_set1_epi16(1))));
    }
    y[i].d = 1 / iscale;
  }
}

// IEEE half with F16C, rounding to nearest even as float_to_half does (NaNs stay quiet NaNs with
// the payload's top bits, overflow goes to inf, subnormals round the same way): the KV cache's
// store path.
EMBER_AVX2 void quant_f16(const float* x, void* dst, int64_t n) {
  auto* h = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i r = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), r);
  }
  for (; i < n; ++i) h[i] = float_to_half(x[i]);
}

}  // namespace

bool cpu_has_avx2() {
  // clang 16 knows no "f16c" here; every AVX2 CPU has F16C.
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
#if defined(__clang__)
         true;
#else
         __builtin_cpu_supports("f16c");
#endif
}

KernelOverrides avx2_kernels() {
  KernelOverrides o;
  if (!cpu_has_avx2()) return o;
  auto at = [](DType t) { return static_cast<size_t>(t); };
  o.quant[at(DType::Q8_0)] = quant_q8_0;
  o.quant[at(DType::Q8_1)] = quant_q8_1;
  o.quant[at(DType::Q8_K)] = quant_q8_k;
  o.quant[at(DType::F16)] = quant_f16;
  add_avx2_gemm(&o);
  add_avx2_attention(&o);
  add_avx2_activations(&o);
  add_avx2_norm(&o);
  add_avx2_argmax(&o);
  return o;
}

}  // namespace ember::tensor::simd
