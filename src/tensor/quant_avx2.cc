// AVX2 (+FMA, F16C) kernels, compiled with per-function target attributes and chosen at run
// time, so the binary still runs on CPUs without them. Each mirrors a scalar reference in
// quant_ref_*.cc: integer dot products per block scaled by the block scales (only the order of
// float additions differs), and quantizers that produce bit-identical blocks.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

#define EMBER_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace ember::tensor::simd {
namespace {

EMBER_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

EMBER_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// Sum of products of 32 signed bytes, as 8 int32 partial sums.
EMBER_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

// 16 bytes of nibbles -> 32 bytes: low nibbles first (elements 0..15), then high (16..31).
EMBER_AVX2 inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(x), _mm_srli_epi16(x, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes: 0xFF where the bit is set.
EMBER_AVX2 inline __m256i bits_32(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuf =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
}

// ---- float types ----

EMBER_AVX2 float dot_f32(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const float*>(w);
  const auto* y = static_cast<const float*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), acc3);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
  }
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

EMBER_AVX2 inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

EMBER_AVX2 float dot_f16(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const uint16_t*>(w);
  const auto* y = static_cast<const uint16_t*>(a);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), acc0);
    acc1 = _mm256_fmadd_ps(load_f16(x + i + 8), load_f16(y + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_f16(x + i), load_f16(y + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += half_to_float(x[i]) * half_to_float(y[i]);
  return s;
}

// ---- legacy blocks against Q8_0 ----

EMBER_AVX2 float dot_q8_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ8_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc);
  }
  return hsum(acc);
}

EMBER_AVX2 float dot_q4_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  const __m256i eight = _mm256_set1_epi8(8);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    const __m256i qx = _mm256_sub_epi8(nibbles_32(x[i].qs), eight);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc);
  }
  return hsum(acc);
}

EMBER_AVX2 float dot_q5_0(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* y = static_cast<const BlockQ8_0*>(a);
  __m256 acc = _mm256_setzero_ps();
  const __m256i f0 = _mm256_set1_epi8(static_cast<char>(0xF0));
  for (int64_t i = 0; i < n / kQK; ++i) {
    const __m256 d = _mm256_set1_ps(half_to_float(x[i].d) * half_to_float(y[i].d));
    // q - 16 = nibble when the 5th bit is set, else nibble - 16 (= nibble | 0xF0 as int8).
    const __m256i hi = _mm256_andnot_si256(bits_32(x[i].qh), f0);
    const __m256i qx = _mm256_or_si256(nibbles_32(x[i].qs), hi);
    const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
    acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qx, qy)), acc);
  }
  return hsum(acc);
}

// ---- K types against Q8_K ----

EMBER_AVX2 float dot_q4_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ4_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) k_scale_min(j, x[i].scales, &sc[j], &mn[j]);
    int summ = 0;
    for (int j = 0; j < 8; ++j) summ += mn[j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i q4 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * j));
      const __m256i lo = _mm256_and_si256(q4, m4);
      const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
      const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 64 * j));
      const __m256i y1 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 64 * j + 32));
      const __m256i p0 =
          _mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), _mm256_set1_epi16(sc[2 * j]));
      const __m256i p1 =
          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), _mm256_set1_epi16(sc[2 * j + 1]));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
    }
    const float dy = y[i].d;
    acc =
        _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * dy), _mm256_cvtepi32_ps(sumi), acc);
    mins += half_to_float(x[i].dmin) * dy * static_cast<float>(summ);
  }
  return hsum(acc) - mins;
}

EMBER_AVX2 float dot_q6_k(int64_t n, const void* w, const void* a) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* sc = x[i].scales;
    int corr = 0;  // sum over sub-blocks of sc * sum(q8): the "- 32" of every level
    for (int j = 0; j < 16; ++j) corr += sc[j] * y[i].bsums[j];
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x[i].ql + 64 * h;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh + 32 * h));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4)),
      };
      for (int k = 0; k < 4; ++k) {
        const int sb = 8 * h + 2 * k;  // sub-blocks of 16 covered by these 32 levels
        const __m256i q8 =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs + 128 * h + 32 * k));
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[sb + 1]), _mm_set1_epi16(sc[sb]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], q8), scales));
      }
    }
    sumi = _mm256_sub_epi32(sumi, _mm256_setr_epi32(32 * corr, 0, 0, 0, 0, 0, 0, 0));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(half_to_float(x[i].d) * y[i].d), _mm256_cvtepi32_ps(sumi),
                          acc);
  }
  return hsum(acc);
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

EMBER_AVX2 void quant_q8_0(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
    __m256i q[4];
    y[i].d = float_to_half(quant_block_32(x, q));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), pack_32(q[0], q[1], q[2], q[3]));
  }
}

// Q8_1 (activations of Q4_1 / Q5_1): Q8_0's levels plus s = d * sum(levels); the levels are in
// [-127, 127], so their int32 sum is exact and packing does not saturate.
EMBER_AVX2 void quant_q8_1(const float* x, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i, x += kQK) {
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
  o.dot[at(DType::F32)] = dot_f32;
  o.dot[at(DType::F16)] = dot_f16;
  o.dot[at(DType::Q8_0)] = dot_q8_0;
  o.dot[at(DType::Q4_0)] = dot_q4_0;
  o.dot[at(DType::Q5_0)] = dot_q5_0;
  o.dot[at(DType::Q4_K)] = dot_q4_k;
  o.dot[at(DType::Q6_K)] = dot_q6_k;
  o.quant[at(DType::Q8_0)] = quant_q8_0;
  o.quant[at(DType::Q8_1)] = quant_q8_1;
  o.quant[at(DType::Q8_K)] = quant_q8_k;
  add_avx2_gemm(&o);
  add_avx2_attention(&o);
  add_avx2_activations(&o);
  return o;
}

}  // namespace ember::tensor::simd
