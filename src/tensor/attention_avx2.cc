// The AVX2 + FMA attention kernel (attention.h), registered for the avx2 level and inherited
// by avx512-vnni: up to four queries of a GQA group at once, each 8-float chunk of a key row
// loaded once for all of them. Positions come as segments (KV blocks); the result does not depend
// on how they are cut. K and V may be f32 or half (widened with F16C as they are loaded, the
// arithmetic unchanged). Head sizes that are not a multiple of 32 use the reference.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "tensor/attention.h"
#include "tensor/exp_avx2.h"
#include "tensor/quant_simd.h"

namespace ember::tensor::simd {
namespace {

// Loops over queries and chunks must unroll, or the accumulators live on the stack.
#define EMBER_UNROLL _Pragma("GCC unroll 8")

// The reference's combination of its eight partial sums: ((0+4)+(1+5)) + ((2+6)+(3+7)).
__attribute__((target("avx2,fma,f16c"))) inline float hsum8(__m256 v) {
  const __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 h = _mm_hadd_ps(x, x);
  return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

// hsum8 of eight vectors at once: lane k of the result is hsum8(v[k]), in the same order of
// additions ((0+4)+(1+5)) + ((2+6)+(3+7)), so the scores are bit for bit those of hsum8.
__attribute__((target("avx2,fma,f16c"))) inline __m256 hsum8x8(const __m256 v[8]) {
  __m256 t[4];  // t[j] = [lo+hi of v[j] | lo+hi of v[j + 4]]
  EMBER_UNROLL
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm256_add_ps(_mm256_permute2f128_ps(v[j], v[j + 4], 0x20),
                         _mm256_permute2f128_ps(v[j], v[j + 4], 0x31));
  }
  return _mm256_hadd_ps(_mm256_hadd_ps(t[0], t[1]), _mm256_hadd_ps(t[2], t[3]));
}

// A row's 8 elements from d on, widened to f32 (exact for half).
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 load8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// hsum8 of four vectors, in the same order of additions: lane k of the result is hsum8(v[k]).
__attribute__((target("avx2,fma,f16c"))) inline __m128 hsum4x8(const __m256 v[4]) {
  // t0 = [lo+hi of v[0] | lo+hi of v[2]], t1 the same of v[1], v[3]
  const __m256 t0 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[2], 0x20),
                                  _mm256_permute2f128_ps(v[0], v[2], 0x31));
  const __m256 t1 = _mm256_add_ps(_mm256_permute2f128_ps(v[1], v[3], 0x20),
                                  _mm256_permute2f128_ps(v[1], v[3], 0x31));
  const __m256 u = _mm256_hadd_ps(t0, t1);
  const __m256 w = _mm256_hadd_ps(u, u);  // [v0 v1 v0 v1 | v2 v3 v2 v3]
  return _mm_shuffle_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1),
                        _MM_SHUFFLE(1, 0, 1, 0));
}

// Prefetches one row of hd elements, line by line, for reading: Locality 3 is the T0 hint (into
// L1), 2 is T1 (into L2). Called from inside the loops that compute, not from a loop of its
// own: GCC deletes a loop whose body is only prefetches.
template <int Locality, typename T>
__attribute__((target("avx2,fma,f16c"))) inline void prefetch_row(const T* r, int32_t hd) {
  const char* p = reinterpret_cast<const char*>(r);
  for (int32_t b = 0; b < hd * static_cast<int32_t>(sizeof(T)); b += 64) {
    __builtin_prefetch(p + b, 0, Locality);
  }
}

// Up to four queries (NQ) at once: each 8-float chunk of a key row is loaded once for all of
// them, eight or four keys per pass (their dot products reduced together, hsum8x8 /
// hsum4x8), then two, then one. Lane j of a query's accumulator sums dimensions
// j mod 8, as the reference's partial sums do. hd % 32 == 0. Scores are independent of the
// grouping, and the weighted sum of V runs in position order across segments, so the result does
// not depend on how the positions are cut into segments.
template <int NQ, typename T>
__attribute__((target("avx2,fma,f16c"))) void group4(const float* q, int64_t qs,
                                                     const KvSegmentOf<T>* segs, int32_t n_segs,
                                                     int64_t stride, int32_t n, int32_t hd,
                                                     float scale, float* scores, float* out,
                                                     int64_t os, float* stats, float softcap) {
  float mx[NQ];
  EMBER_UNROLL
  for (int g = 0; g < NQ; ++g) mx[g] = -INFINITY;
  // Keys per pass. For two and three queries, four keys keep the accumulators, the query
  // vectors and a key vector within the 16 ymm registers (eight spilled them); SmolLM2's
  // 3-query groups prefill 2,048 tokens 5-10% faster so. Four queries spill either way, and
  // eight keys measured faster there (Gemma: four were 10% slower).
  constexpr int KP = NQ == 2 || NQ == 3 ? 4 : 8;
  const __m256 vscale = _mm256_set1_ps(scale);
  int32_t base = 0;  // position of the segment's first row
  for (int32_t s = 0; s < n_segs; ++s) {
    const T* k = segs[s].k;
    const int32_t m = segs[s].n;
    // Each segment is a short run (one KV block's rows of this head) far from the next, so the
    // hardware's streams restart at every one: as it reads keys i..i+KP, the loop asks for the
    // next segment's keys i..i+KP (into L1) and this segment's values i..i+KP (into L2, read by
    // the V pass after the call's scores). kernels_bench attention, head-major blocks: 20.3 ->
    // 12.9 ms per step; two or three segments ahead, or values into L1, were slower.
    const T* kn = s + 1 < n_segs ? segs[s + 1].k : nullptr;
    const int32_t mn = s + 1 < n_segs ? segs[s + 1].n : 0;
    int32_t i = 0;
    for (; i + KP <= m; i += KP) {
      EMBER_UNROLL
      for (int j = 0; j < KP; ++j) {
        prefetch_row<2>(segs[s].v + (i + j) * stride, hd);
        if (i + j < mn) prefetch_row<3>(kn + (i + j) * stride, hd);
      }
      const T* k0 = k + i * stride;
      __m256 a[NQ][KP];
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) EMBER_UNROLL
      for (auto& v : a[g]) v = _mm256_setzero_ps();
      for (int32_t d = 0; d < hd; d += 8) {
        __m256 qv[NQ];
        EMBER_UNROLL
        for (int g = 0; g < NQ; ++g) qv[g] = _mm256_loadu_ps(q + g * qs + d);
        EMBER_UNROLL
        for (int j = 0; j < KP; ++j) {
          const __m256 kv = load8(k0 + j * stride + d);
          EMBER_UNROLL
          for (int g = 0; g < NQ; ++g) a[g][j] = _mm256_fmadd_ps(qv[g], kv, a[g][j]);
        }
      }
      const int32_t p = base + i;
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) {
        __m128 m4;
        if constexpr (KP == 8) {
          const __m256 sv = _mm256_mul_ps(hsum8x8(a[g]), vscale);
          _mm256_storeu_ps(scores + g * n + p, sv);
          m4 = _mm_max_ps(_mm256_castps256_ps128(sv), _mm256_extractf128_ps(sv, 1));
        } else {
          m4 = _mm_mul_ps(hsum4x8(a[g]), _mm256_castps256_ps128(vscale));
          _mm_storeu_ps(scores + g * n + p, m4);
        }
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        mx[g] = std::max(mx[g], _mm_cvtss_f32(m4));
      }
    }
    for (; i + 2 <= m; i += 2) {
      const T* k0 = k + i * stride;
      const T* k1 = k0 + stride;
      __m256 a0[NQ], a1[NQ];
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) a0[g] = a1[g] = _mm256_setzero_ps();
      for (int32_t d = 0; d < hd; d += 8) {
        const __m256 kv0 = load8(k0 + d), kv1 = load8(k1 + d);
        EMBER_UNROLL
        for (int g = 0; g < NQ; ++g) {
          const __m256 qv = _mm256_loadu_ps(q + g * qs + d);
          a0[g] = _mm256_fmadd_ps(qv, kv0, a0[g]);
          a1[g] = _mm256_fmadd_ps(qv, kv1, a1[g]);
        }
      }
      const int32_t p = base + i;
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) {
        const float s0 = hsum8(a0[g]) * scale, s1 = hsum8(a1[g]) * scale;
        scores[g * n + p] = s0;
        scores[g * n + p + 1] = s1;
        mx[g] = std::max(mx[g], std::max(s0, s1));
      }
    }
    for (; i < m; ++i) {
      const T* k0 = k + i * stride;
      __m256 a0[NQ];
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) a0[g] = _mm256_setzero_ps();
      for (int32_t d = 0; d < hd; d += 8) {
        const __m256 kv0 = load8(k0 + d);
        EMBER_UNROLL
        for (int g = 0; g < NQ; ++g) {
          a0[g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * qs + d), kv0, a0[g]);
        }
      }
      const int32_t p = base + i;
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) {
        scores[g * n + p] = hsum8(a0[g]) * scale;
        mx[g] = std::max(mx[g], scores[g * n + p]);
      }
    }
    base += m;
  }
  if (softcap > 0.f) {
    for (int g = 0; g < NQ; ++g) mx[g] = ref::softcap_scores(scores + g * n, n, softcap);
  }
  // Softmax, 8 scores at a time (the tail one by one with std::exp).
  EMBER_UNROLL
  for (int g = 0; g < NQ; ++g) {
    float* sc = scores + g * n;
    const __m256 vmx = _mm256_set1_ps(mx[g]);
    __m256 vsum = _mm256_setzero_ps();
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(sc + i), vmx));
      _mm256_storeu_ps(sc + i, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum8(vsum);
    for (; i < n; ++i) {
      sc[i] = std::exp(sc[i] - mx[g]);
      sum += sc[i];
    }
    const __m256 inv = _mm256_set1_ps(1.f / sum);
    i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(sc + i, _mm256_mul_ps(_mm256_loadu_ps(sc + i), inv));
    const float inv1 = 1.f / sum;
    for (; i < n; ++i) sc[i] *= inv1;
    if (stats != nullptr) {
      stats[2 * g] = mx[g];
      stats[2 * g + 1] = sum;
    }
  }
  // out = weights . V, VW vectors of output per query per pass, V rows read once for all
  // queries. VW keeps the accumulators, the V vectors and the broadcast weight within the 16
  // ymm registers: with one accumulator spilled, the loop waited on a store-to-load round trip
  // every position (SmolLM2, 3 queries: 24% of the kernel's samples on that one store). The
  // passes over a head's dimensions run segment by segment, the accumulators parked in `out`
  // between segments: a segment's V rows (one KV block's) stay in L1 for all hd / (8 VW)
  // passes, where passes over all positions streamed V from beyond L2 that many times. Each
  // output element is the same chain of fused multiply-adds in position order whatever VW is
  // and however the positions are cut.
  constexpr int VW = NQ <= 2 ? 4 : 2;
  EMBER_UNROLL
  for (int g = 0; g < NQ; ++g) std::fill(out + g * os, out + g * os + hd, 0.f);
  int32_t p0 = 0;  // position of the segment's first row
  for (int32_t s = 0; s < n_segs; ++s) {
    const T* v = segs[s].v;
    const int32_t m = segs[s].n;
    for (int32_t d = 0; d < hd; d += 8 * VW) {
      __m256 acc[NQ][VW];
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) EMBER_UNROLL
      for (int j = 0; j < VW; ++j) acc[g][j] = _mm256_loadu_ps(out + g * os + d + 8 * j);
      for (int32_t i = 0; i < m; ++i) {
        const T* vp = v + i * stride + d;
        __m256 vv[VW];
        EMBER_UNROLL
        for (int j = 0; j < VW; ++j) vv[j] = load8(vp + 8 * j);
        EMBER_UNROLL
        for (int g = 0; g < NQ; ++g) {
          const __m256 w = _mm256_broadcast_ss(scores + g * n + p0 + i);
          EMBER_UNROLL
          for (int j = 0; j < VW; ++j) acc[g][j] = _mm256_fmadd_ps(w, vv[j], acc[g][j]);
        }
      }
      EMBER_UNROLL
      for (int g = 0; g < NQ; ++g) {
        float* o = out + g * os + d;
        EMBER_UNROLL
        for (int j = 0; j < VW; ++j) _mm256_storeu_ps(o + 8 * j, acc[g][j]);
      }
    }
    p0 += m;
  }
}

template <typename T>
__attribute__((target("avx2,fma,f16c"))) void attend_group_avx2(
    const float* q, int64_t q_stride, int32_t nq, const KvSegmentOf<T>* segs, int32_t n_segs,
    int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
    int64_t out_stride, float* stats, float softcap) {
  if (hd % 32 != 0) {
    ref::attend_group_segments(q, q_stride, nq, segs, n_segs, kv_stride, n, hd, scale, scores, out,
                               out_stride, stats, softcap);
    return;
  }
  for (int32_t g = 0; g < nq; g += 4) {
    const float* qg = q + g * q_stride;
    float* og = out + g * out_stride;
    float* st = stats != nullptr ? stats + 2 * g : nullptr;
    switch (std::min(4, nq - g)) {
      case 4:
        group4<4>(qg, q_stride, segs, n_segs, kv_stride, n, hd, scale, scores, og, out_stride, st,
                  softcap);
        break;
      case 3:
        group4<3>(qg, q_stride, segs, n_segs, kv_stride, n, hd, scale, scores, og, out_stride, st,
                  softcap);
        break;
      case 2:
        group4<2>(qg, q_stride, segs, n_segs, kv_stride, n, hd, scale, scores, og, out_stride, st,
                  softcap);
        break;
      default:
        group4<1>(qg, q_stride, segs, n_segs, kv_stride, n, hd, scale, scores, og, out_stride, st,
                  softcap);
        break;
    }
  }
}

}  // namespace

void add_avx2_attention(KernelOverrides* o) {
  o->attend_group = &attend_group_avx2<float>;
  o->attend_group_f16 = &attend_group_avx2<uint16_t>;
}

}  // namespace ember::tensor::simd
