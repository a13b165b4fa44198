// The GEMM tiles of gemm_tiles.h compiled for AVX-512 (F, BW, VL, DQ) with VNNI: int8 and int16
// dot products fuse into vpdpbusd / vpdpwssd, and the 32 vector registers hold 4 x 4 tiles of
// accumulators. Vectors stay 256 bits wide (a legacy block is 32 bytes; a K sub-block is 32
// levels), which also avoids 512-bit frequency effects. The 1 x 1 tiles are this level's
// vec_dot kernels. The legacy types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) have their own kernels at
// the end, which reduce each block to one integer before any float work. Chosen at run
// time by quant.cc when the CPU has these features (Debian's Highway emits no VNNI, hence
// intrinsics).
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

// After every include that defines non-local functions: only this file's own (internal-linkage)
// code is compiled for AVX-512, so no inline function shared with other TUs gets AVX-512 code.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
// GCC 12's _mm512_undefined_* (self-initialised locals, used by several 512-bit intrinsics)
// trip -Wuninitialized once inlined: a known false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "tensor/gemm_tiles.h"    // IWYU pragma: keep
#include "tensor/legacy_phase.h"  // IWYU pragma: keep

namespace ember::tensor::simd {
namespace {

struct IsaAvx512Vnni {
  static constexpr int kMaxRows = 4, kMaxTokens = 4;
  // Rows per single-token (decode) tile; see IsaAvx2::decode_rows for why one sequential
  // stream beats interleaved rows. Measured here (kernels_bench, AMD EPYC Zen 4 VM, 2 MiB pages,
  // medians of three rounds, GB/s at 1 / 2 threads): Q6_K 65536x1024 1 row 18.2 / 29.0, 4 rows
  // 4.4 / 7.9; Q4_K 65536x1024 1 row 14.3 / 24.8, 4 rows 10.9 / 19.2. The legacy types run the
  // kernels at the end of this file (one row at a time, in their own float order).
  static constexpr int decode_rows(DType t) {
    switch (t) {
      case DType::F32:
      case DType::F16:
      case DType::BF16:
        return kMaxRows;  // not measured: float weight matrices are rare in GGUF models
      default:
        return 1;
    }
  }
  // 0x10 in each byte whose bit is set in the 32 bits at p (one mask move, no shuffles).
  static __m256i bits_to_16(const uint8_t* p) {
    uint32_t bits;
    __builtin_memcpy(&bits, p, 4);
    return _mm256_maskz_mov_epi8(_cvtu32_mask32(bits), _mm256_set1_epi8(0x10));
  }
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(acc, u, s);
  }
  static __m256i dot_s16(__m256i acc, __m256i x, __m256i y) {
    return _mm256_dpwssd_epi32(acc, x, y);
  }
  // fp16 d (low 16 bits of each 32-bit word of dm) of 8 blocks, and (d, m) pairs, as floats.
  static __m256 d_of(__m256i dm) { return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dm)); }
  static void d_m_of(__m256i dm, __m256* d, __m256* m) {
    const __m512 f = _mm512_cvtph_ps(dm);  // d0 m0 d1 m1 ..
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    *d = _mm512_castps512_ps256(_mm512_permutexvar_ps(even, f));
    *m = _mm512_castps512_ps256(_mm512_permutexvar_ps(odd, f));
  }
};

// ---- packed K-quant tiles for prefill (Q4_K, Q5_K, Q6_K) ----
// Packing as in gemm_tiles.h (KPack); two tokens share each 512-bit vector (token t in the low
// half, t + 1 in the high half, the packed row repeated in both). Each half
// computes exactly what tile_k computes for its (row, token) in the same order (integer sums are
// exact; the float ops per lane are the same fmsub / mul / fmadd).
constexpr int kKPackRows = 4;
using KP = KPack<kKPackRows>;

inline __m512i bcast256(const uint8_t* p) {
  return _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// R packed rows x 2T tokens (T pairs); with kOdd the last pair has only its low token.
template <int R, int T, bool kOdd>
void k_packed_rt(int64_t n, const uint8_t* buf, const uint8_t* a, size_t as, float* y, size_t ys) {
  __m512 acc[R][T];
  EMBER_UNROLL
  for (auto& row : acc) {
    EMBER_UNROLL
    for (auto& v : row) v = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const uint8_t* base = buf + i * KP::kBlockBytes;
    const BlockQ8_K* y0[T];
    const BlockQ8_K* y1[T];
    EMBER_UNROLL
    for (int t = 0; t < T; ++t) {
      y0[t] = reinterpret_cast<const BlockQ8_K*>(a + 2 * t * as) + i;
      y1[t] = (kOdd && t == T - 1) ? nullptr
                                   : reinterpret_cast<const BlockQ8_K*>(a + (2 * t + 1) * as) + i;
    }
    __m512i sumi[R][T];
    EMBER_UNROLL
    for (auto& row : sumi) {
      EMBER_UNROLL
      for (auto& v : row) v = _mm512_setzero_si512();
    }
    EMBER_UNROLL
    for (int k = 0; k < 8; ++k) {
      __m512i qy[T];
      EMBER_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m256i hi = y1[t] == nullptr ? _mm256_setzero_si256() : load256(y1[t]->qs + 32 * k);
        qy[t] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(y0[t]->qs + 32 * k)), hi, 1);
      }
      EMBER_UNROLL
      for (int r = 0; r < R; ++r) {
        const __m512i ux = bcast256(base + r * KP::kRowBytes + 32 * k);
        const __m512i sc = bcast256(base + r * KP::kRowBytes + KP::kScOff + 32 * k);
        EMBER_UNROLL
        for (int t = 0; t < T; ++t) {
          sumi[r][t] = _mm512_dpwssd_epi32(sumi[r][t], _mm512_maddubs_epi16(ux, qy[t]), sc);
        }
      }
    }
    __m512i bsums[T];
    __m512 dy[T];
    EMBER_UNROLL
    for (int t = 0; t < T; ++t) {
      const __m256i bhi = y1[t] == nullptr ? _mm256_setzero_si256() : load256(y1[t]->bsums);
      bsums[t] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(y0[t]->bsums)), bhi, 1);
      const __m256 dhi = y1[t] == nullptr ? _mm256_setzero_ps() : _mm256_set1_ps(y1[t]->d);
      dy[t] = _mm512_insertf32x8(_mm512_set1_ps(y0[t]->d), dhi, 1);
    }
    EMBER_UNROLL
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = base + r * KP::kRowBytes;
      const __m512i m16 = bcast256(p + KP::kMinOff);
      float dd[2];
      __builtin_memcpy(dd, p + KP::kDOff, sizeof(dd));
      const __m512 d = _mm512_set1_ps(dd[0]), dmin = _mm512_set1_ps(dd[1]);
      EMBER_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m512 mins = _mm512_cvtepi32_ps(_mm512_madd_epi16(m16, bsums[t]));
        const __m512 v =
            _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(sumi[r][t]), _mm512_mul_ps(dmin, mins));
        acc[r][t] = _mm512_fmadd_ps(dy[t], v, acc[r][t]);
      }
    }
  }
  EMBER_UNROLL
  for (int r = 0; r < R; ++r) {
    EMBER_UNROLL
    for (int t = 0; t < T; ++t) {
      y[2 * t * ys + r] = tile_hsum(_mm512_castps512_ps256(acc[r][t]));
      if (!(kOdd && t == T - 1)) {
        y[(2 * t + 1) * ys + r] = tile_hsum(_mm512_extractf32x8_ps(acc[r][t], 1));
      }
    }
  }
}

template <int R>
void k_packed_rows(int64_t n, const uint8_t* buf, const uint8_t* a, size_t as, int64_t nt, float* y,
                   size_t ys) {
  int64_t t = 0;
  for (; t + 4 <= nt; t += 4) k_packed_rt<R, 2, false>(n, buf, a + t * as, as, y + t * ys, ys);
  switch (nt - t) {
    case 3:
      k_packed_rt<R, 2, true>(n, buf, a + t * as, as, y + t * ys, ys);
      break;
    case 2:
      k_packed_rt<R, 1, false>(n, buf, a + t * as, as, y + t * ys, ys);
      break;
    case 1:
      k_packed_rt<R, 1, true>(n, buf, a + t * as, as, y + t * ys, ys);
      break;
    default:
      break;
  }
}

using PackedRowsFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, int64_t, float*,
                              size_t);

// The levels, scales and mins are already unpacked, so one packed kernel serves every K type.
void k_packed(int64_t n, const uint8_t* buf, int nr, const uint8_t* a, size_t as, int64_t nt,
              float* y, size_t ys) {
  static constexpr PackedRowsFn table[kKPackRows] = {&k_packed_rows<1>, &k_packed_rows<2>,
                                                     &k_packed_rows<3>, &k_packed_rows<4>};
  table[nr - 1](n, buf, a, as, nt, y, ys);
}

template <class U>
void add_k_packed(KernelOverrides* o, DType t) {
  GemmKernel& g = o->gemm[static_cast<size_t>(t)];
  g.pack = &k_pack<U, KP>;
  g.packed = &k_packed;
  g.pack_bytes = &KP::bytes;
  g.pack_rows = kKPackRows;
  g.pack_min_tokens = 4;
}

// ---- the legacy types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) ----
// In the block-first float order of legacy_phase.h (its row side is this level's decode, tile
// and vec_dot), with this level's prefill path for that order: 16 rows are packed with row r's
// 4 levels k..k+3 in 32-bit lane r (a transpose), so 8 vpdpbusd against broadcast activation
// words give the 16 rows' block sums directly, and one multiply and one FMA scale 16 (row,
// block) terms. Per (row, token) both compute the same exact integers and the same float
// operations in the same order, so the results are bit-identical whatever path a token takes
// (tests/tensor/gemm_test.cc).

// ---- prefill: 16 rows in the lanes ----
// Packed block b of 16 rows: 8 x 64 bytes of the unsigned levels (vector k, 32-bit lane r: row
// r's levels 4k..4k+3), 16 float d_w, 16 float m_w (types with a min; zero otherwise). vpdpbusd
// dots them against the signed q_a; the offset types then add the activation side's
// -kOffset * sum(q_a), as the row side does.
constexpr int kLanes = 16;
constexpr size_t kLevelBytes = 8 * 64, kDOff = kLevelBytes, kMOff = kDOff + 64;
constexpr size_t kPackedBlock = kMOff + 64;

template <class U>
void pack16(int64_t nb, const uint8_t* w, size_t ws, int nr, uint8_t* buf) {
  using P = Phase<U, IsaAvx512Vnni>;
  using B = typename P::B;
  const __m512i idx_lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i idx_hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_slice(w + kLanes * ws, kLanes * ws, nb, b);  // the next 16 rows (contiguous)
    uint8_t* pb = buf + static_cast<size_t>(b) * kPackedBlock;
    alignas(32) uint16_t d16[kLanes] = {}, m16[kLanes] = {};
    // z[r] = rows r | r + 8 (missing rows zero); then per 256-bit half an 8 x 8 transpose of
    // 32-bit words.
    __m512i z[8], t[8], u[8];
    const auto row_levels = [&](int r) {
      if (r >= nr) return _mm256_setzero_si256();
      const B& blk = reinterpret_cast<const B*>(w + static_cast<size_t>(r) * ws)[b];
      d16[r] = blk.d;
      if constexpr (P::kMin) m16[r] = blk.m;
      return P::levels(blk);
    };
    EMBER_UNROLL
    for (int r = 0; r < 8; ++r) {
      z[r] = _mm512_inserti64x4(_mm512_castsi256_si512(row_levels(r)), row_levels(r + 8), 1);
    }
    EMBER_UNROLL
    for (int r = 0; r < 8; r += 2) {
      t[r] = _mm512_unpacklo_epi32(z[r], z[r + 1]);
      t[r + 1] = _mm512_unpackhi_epi32(z[r], z[r + 1]);
    }
    EMBER_UNROLL
    for (int h = 0; h < 8; h += 4) {
      u[h] = _mm512_unpacklo_epi64(t[h], t[h + 2]);
      u[h + 1] = _mm512_unpackhi_epi64(t[h], t[h + 2]);
      u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
      u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    // u[m] (rows 0..3 | 8..11) and u[4 + m] (rows 4..7 | 12..15), 128-bit chunk c: word
    // 4 (c % 2) + m. Vector k = 4h + m takes chunk h of each.
    EMBER_UNROLL
    for (int m = 0; m < 4; ++m) {
      _mm512_storeu_si512(pb + 64 * m, _mm512_permutex2var_epi64(u[m], idx_lo, u[4 + m]));
      _mm512_storeu_si512(pb + 64 * (4 + m), _mm512_permutex2var_epi64(u[m], idx_hi, u[4 + m]));
    }
    _mm512_storeu_ps(pb + kDOff,
                     _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(d16))));
    _mm512_storeu_ps(pb + kMOff,
                     _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(m16))));
  }
}

inline __m512i bcast32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return _mm512_set1_epi32(v);
}

// Where block16 finds block b's operands for 16 rows: the unsigned levels as 8 vectors
// (vector k, 32-bit lane r: row r's levels 4k..4k+3), d_w and m_w as 16 floats.
// The run-time pack (pack16): everything already unpacked.
struct FromPack {
  const uint8_t* buf;
  const uint8_t* tile(int64_t b) const { return buf + static_cast<size_t>(b) * kPackedBlock; }
  void prefetch(int64_t) const {}
  static __m512i levels(const uint8_t* pb, int k) { return _mm512_loadu_si512(pb + 64 * k); }
  static __m512 d(const uint8_t* pb) { return _mm512_loadu_ps(pb + kDOff); }
  static __m512 m(const uint8_t* pb) { return _mm512_loadu_ps(pb + kMOff); }
};

// A group of 16 rows in the interleaved layout (tensor/interleave.h): the fp16 scales, then the
// rows' quant words side by side, so a vector load gives vector k's raw bytes (Q8_0: the signed
// levels, flipped to unsigned as UnpackUQ8_0 does; the 4- and 5-bit types: word k's low nibbles
// are levels 4k..4k+3, its high nibbles levels 16+4k..16+4k+3, and the reordered fifth-bit word
// holds vector k's fifth bits at bit k of each byte).
template <class U>
struct FromInterleaved : InterleavedGroup<U, kLanes> {
  using G = InterleavedGroup<U, kLanes>;
  using typename G::B;
  static constexpr bool kQ8 = std::is_same_v<B, BlockQ8_0>;
  static __m512i levels(const uint8_t* pb, int k) {
    if constexpr (kQ8) {
      return _mm512_xor_si512(_mm512_loadu_si512(pb + G::kWords + 64 * k),
                              _mm512_set1_epi8(static_cast<char>(0x80)));
    } else {
      const __m512i raw = _mm512_loadu_si512(pb + G::kWords + 64 * (k & 3));
      const __m512i lo4 = _mm512_set1_epi8(0x0F);
      const __m512i nib =
          k < 4 ? _mm512_and_si512(raw, lo4) : _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
      if constexpr (!G::kQh) {
        return nib;
      } else {
        const __m512i qh = _mm512_loadu_si512(pb + G::kQhOff);
        const __m512i at4 = k <= 4 ? _mm512_slli_epi32(qh, 4 - k) : _mm512_srli_epi32(qh, k - 4);
        return _mm512_or_si512(nib, _mm512_and_si512(at4, _mm512_set1_epi8(0x10)));
      }
    }
  }
  static __m512 d(const uint8_t* pb) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)));
  }
  static __m512 m(const uint8_t* pb) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32)));
  }
};

// Block b's float terms for one token, in the order of legacy_phase.h: s (16 rows' exact
// integer sums) scaled into acc. Every multi-row kernel of this level goes through it.
template <class U, class Src>
[[gnu::always_inline]] inline __m512 block_terms(__m512i s, __m512 dw, const uint8_t* pb,
                                                 const ActSide& side, int64_t b, __m512 acc) {
  using P = Phase<U, IsaAvx512Vnni>;
  if constexpr (!P::kMin) s = _mm512_add_epi32(s, _mm512_set1_epi32(side.corr[b]));
  const __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(side.d[b]));
  acc = _mm512_fmadd_ps(sc, _mm512_cvtepi32_ps(s), acc);
  if constexpr (P::kMin) acc = _mm512_fmadd_ps(Src::m(pb), _mm512_set1_ps(side.s[b]), acc);
  return acc;
}

// Block b of 16 rows (its tile at pb) against NT tokens: acc[t] += token t's terms, in the
// order of legacy_phase.h. q[t]: token t's activation blocks (q_stride bytes apart), side[t]
// its activation side. Each weight vector is loaded (and unpacked) once for the NT tokens.
template <class U, int NT, class Src>
[[gnu::always_inline]] inline void block16(const uint8_t* pb, int64_t b, const uint8_t* const* q,
                                           size_t q_stride, const ActSide* const* side,
                                           __m512* acc) {
  using P = Phase<U, IsaAvx512Vnni>;
  // The activation bytes sit after the block's scale words.
  constexpr size_t kQsOff = P::kMin ? offsetof(BlockQ8_1, qs) : offsetof(BlockQ8_0, qs);
  // Two chains of four per token: eight dependent vpdpbusd would be latency-bound.
  __m512i s2[NT][2];
  EMBER_UNROLL
  for (int t = 0; t < NT; ++t) s2[t][0] = s2[t][1] = _mm512_setzero_si512();
  EMBER_UNROLL
  for (int k = 0; k < 8; ++k) {
    const __m512i wk = Src::levels(pb, k);
    EMBER_UNROLL
    for (int t = 0; t < NT; ++t) {
      const uint8_t* qb = q[t] + static_cast<size_t>(b) * q_stride + kQsOff;
      s2[t][k & 1] = _mm512_dpbusd_epi32(s2[t][k & 1], wk, bcast32(qb + 4 * k));
    }
  }
  const __m512 dw = Src::d(pb);
  EMBER_UNROLL
  for (int t = 0; t < NT; ++t) {
    acc[t] = block_terms<U, Src>(_mm512_add_epi32(s2[t][0], s2[t][1]), dw, pb, *side[t], b, acc[t]);
  }
}

// Token t's result from its 8 phase accumulators.
inline __m512 phase_sum(const __m512* acc) {
  return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                       _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
}

// NT tokens (1 to kMemoryOrderTokens) against 16 rows (src: a packed block or an interleaved
// group) with the phases inside, all 8 NT accumulators live, the blocks in memory order
// (decode): lane r of out[t] = row r's dot product with token t.
template <class U, int NT, class Src>
void packed16_token(int64_t nb, const Src& src, const uint8_t* const* q, size_t q_stride,
                    const ActSide* const* side, __m512* out) {
  __m512 acc[kPhases][NT];
  EMBER_UNROLL
  for (auto& row : acc) {
    EMBER_UNROLL
    for (auto& v : row) v = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < nb; g += kPhases) {
    EMBER_UNROLL
    for (int j = 0; j < kPhases; ++j) {
      const int64_t b = g + j;
      if (b >= nb) break;
      src.prefetch(b);
      block16<U, NT, Src>(src.tile(b), b, q, q_stride, side, acc[j]);
    }
  }
  EMBER_UNROLL
  for (int t = 0; t < NT; ++t) {
    __m512 v[kPhases];
    EMBER_UNROLL
    for (int j = 0; j < kPhases; ++j) v[j] = acc[j][t];
    out[t] = phase_sum(v);
  }
}

// Phases outside, for NT tokens: phase j's blocks (b = j, j + 8, ...) for every token, then
// phase j + 1's, so only one accumulator per token is live; block(j, b, acc) adds block b's
// terms (of phase j) of the NT tokens to acc[0..NT). Each block's terms go into their phase's
// accumulator in the same order as in packed16_token, so the results are bit-identical to it.
template <int NT, class Block>
[[gnu::always_inline]] inline void phases_outside(int64_t nb, Block&& block, __m512* out) {
  __m512 phase[NT][kPhases];
  EMBER_UNROLL
  for (int j = 0; j < kPhases; ++j) {
    __m512 acc[NT];
    EMBER_UNROLL
    for (auto& v : acc) v = _mm512_setzero_ps();
    for (int64_t b = j; b < nb; b += kPhases) block(j, b, acc);
    EMBER_UNROLL
    for (int t = 0; t < NT; ++t) phase[t][j] = acc[t];
  }
  EMBER_UNROLL
  for (int t = 0; t < NT; ++t) out[t] = phase_sum(phase[t]);
}

// NT tokens (2 to 4) against 16 rows with the phases outside; the 16 rows' tiles (a few KB)
// stay in L1 across the 8 passes. Every block prefetches its own tile's distance ahead, in
// whichever pass reads it, so the prefetches are spread evenly over the passes (as at avx2).
// The first pass used to prefetch all 8 phases' tiles (40 lines for Q4_1) at each of its
// blocks: a burst that stalled the core (a fifth of this kernel's samples on the lines after
// those prefetches, Intel Xeon model 207, weights in L3; most likely the line-fill buffers
// full, which this VM's lack of hardware counters leaves unconfirmed).
// kernels_bench, 1 thread, 2 paired rounds, burst vs spread, us: Q4_1 2048x640 at 8 tokens
// 84 -> 76, 4096x4096 1320 -> 1060; Q8_0 2048x640 91 -> 76; Q5_0 1024x640 55 -> 50; at
// avx512-vnni Q4_1 4096x4096 at 32 tokens 4520 -> 3780-4070.
template <class U, int NT, class Src>
void phased16_tokens(int64_t nb, const Src& src, const uint8_t* const* q, size_t q_stride,
                     const ActSide* const* side, __m512* out) {
  phases_outside<NT>(
      nb,
      [&](int, int64_t b, __m512* acc) {
        src.prefetch(b);
        block16<U, NT, Src>(src.tile(b), b, q, q_stride, side, acc);
      },
      out);
}

// NT tokens (token t's activations at a + t * as, its side at sides[t]) against 16 rows at src
// through kernel (packed16_token or phased16_tokens), lanes `live` stored at y + t * ys.
template <int NT, class Kernel, class Src>
void token_block16(Kernel kernel, int64_t nb, const Src& src, const uint8_t* a, size_t as,
                   size_t q_stride, const ActSide* sides, __mmask16 live, float* y, size_t ys) {
  const uint8_t* q[NT];
  const ActSide* st[NT];
  EMBER_UNROLL
  for (int t = 0; t < NT; ++t) {
    q[t] = a + static_cast<size_t>(t) * as;
    st[t] = &sides[t];
  }
  __m512 v[NT];
  kernel(nb, src, q, q_stride, st, v);
  EMBER_UNROLL
  for (int t = 0; t < NT; ++t) _mm512_mask_storeu_ps(y + static_cast<size_t>(t) * ys, live, v[t]);
}

// Every token against 16 rows at src, lanes `live` stored at y + r0 (token t at y + t * ys):
// kTokenBlock at a time with the phases outside, one token (decode) with the phases inside.
// kernels_bench, 1 thread, Intel Xeon VM, 2 paired rounds, token pairs (phases inside) against
// blocks of 4: Q4_1 1536x576 at 8 tokens 65.8-66.6 vs 56.0-57.5 us, at 64 505-534 vs 443-452;
// Q4_1 131072x576 at 8 tokens 5.5-6.1 vs 5.3-6.2 ms; Q8_0 262144x640 at 8 tokens 20.3-21.2 vs
// 18.4-19.1 ms; Q5_0 1024x640 at 64 355-358 vs 299-307 us. Blocks of 8 were slower than pairs
// (their 16 integer chains and 8 accumulators spill), blocks of 6 no faster at 8 tokens.
constexpr int kTokenBlock = 4;
// Up to this many tokens in a block the phases stay inside and the blocks run in memory order
// (packed16_token: 8 accumulators per token, 24 of the 32 registers at 3), which streams the
// weights from memory better than the phases outside: kernels_bench, 2 threads, 5 paired
// rounds, Q8_0 262144x640 / Q5_0 131072x640 / Q4_1 131072x576 paired ratios at 2 tokens 0.92,
// 0.71, 0.79 and at 3 tokens 0.83, 0.78, 0.89 (the same at avx2 up to 2 tokens: gemm_avx2.cc).
constexpr int kMemoryOrderTokens = 3;
template <class U, class Src>
void tokens16(int64_t nb, const Src& src, const uint8_t* a, size_t as, size_t nt,
              const ActSide* sides, __mmask16 live, float* y, size_t ys) {
  const size_t q_stride = as / static_cast<size_t>(nb);  // bytes per activation block
  for_token_blocks<kTokenBlock>(nt, [&](auto n, size_t t) {
    constexpr int kN = decltype(n)::value;
    if constexpr (kN <= kMemoryOrderTokens) {
      token_block16<kN>(&packed16_token<U, kN, Src>, nb, src, a + t * as, as, q_stride, sides + t,
                        live, y + t * ys, ys);
    } else {
      token_block16<kN>(&phased16_tokens<U, kN, Src>, nb, src, a + t * as, as, q_stride, sides + t,
                        live, y + t * ys, ys);
    }
  });
}

// A run of rows (a matmul task) against nt tokens: the activation side once per token, then
// blocks of 16 rows packed into L1 scratch and dotted against every token.
template <class U>
void phase_packed_run(int64_t n, const uint8_t* w, size_t ws, int64_t nrows, const uint8_t* a,
                      size_t as, int64_t nt, float* y, size_t ys) {
  const int64_t nb = n / kQK;
  const size_t nbs = static_cast<size_t>(nb), nts = static_cast<size_t>(nt);
  const ActSide* sides = act_sides<U, IsaAvx512Vnni>(nb, a, as, nts);
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < nbs * kPackedBlock) buf.resize(nbs * kPackedBlock);
  for (int64_t r = 0; r < nrows; r += kLanes) {
    const int nr = static_cast<int>(std::min<int64_t>(kLanes, nrows - r));
    pack16<U>(nb, w + static_cast<size_t>(r) * ws, ws, nr, buf.data());
    tokens16<U>(nb, FromPack{buf.data()}, a, as, nts, sides, static_cast<__mmask16>((1u << nr) - 1),
                y + r, ys);
  }
}

// A group's levels unpacked once into pack16's layout (no transpose: the words are already in
// lanes), for the 5-bit types at kUnpackTokens tokens or more: their fifth bits cost four more
// operations per vector, which a token pair would pay again for every pair. kernels_bench, 1
// thread, 3 paired rounds, read directly vs unpacked: Q5_0 1024x640 at 8 tokens 54.8 vs 60.6
// us, at 64 tokens 443 vs 402; 2048x640 at 8 110 vs 129, at 64 959 vs 792.
constexpr int64_t kUnpackTokens = 16;

template <class U>
void unpack16(int64_t nb, const FromInterleaved<U>& src, uint8_t* buf) {
  using I = FromInterleaved<U>;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tl = src.tile(b);
    prefetch_next_group(tl, static_cast<size_t>(nb) * I::kTile, I::kTile);
    uint8_t* pb = buf + static_cast<size_t>(b) * kPackedBlock;
    EMBER_UNROLL
    for (int k = 0; k < 8; ++k) _mm512_storeu_si512(pb + 64 * k, I::levels(tl, k));
    _mm512_storeu_ps(pb + kDOff, I::d(tl));
    _mm512_storeu_ps(pb + kMOff, I::kHeads == 2 ? I::m(tl) : _mm512_setzero_ps());
  }
}

// The same for whole groups of 16 interleaved rows, decode and prefill: nothing to pack. The
// 4-bit types and Q8_0 unpack their levels per token pair as they are read (unpacking a group
// once into pack16's layout for 2 or more tokens was slower: kernels_bench, 1 thread, 3 paired
// rounds, Q4_1 2048x640 at 8 tokens 95 vs 119 us, at 64 tokens 769 vs 797 us; Q8_0 2048x640
// at 64 tokens 753 vs 864).
template <class U>
void phase_interleaved_run(int64_t n, const uint8_t* w, int64_t nrows, const uint8_t* a, size_t as,
                           int64_t nt, const void* prep, float* y, size_t ys) {
  const int64_t nb = n / kQK;
  const size_t nts = static_cast<size_t>(nt);
  const auto* sides = static_cast<const ActSide*>(prep);
  const size_t group_bytes = static_cast<size_t>(nb) * FromInterleaved<U>::kTile;
  const bool unpack = FromInterleaved<U>::kQh && nt >= kUnpackTokens;
  thread_local std::vector<uint8_t> buf;
  if (unpack && buf.size() < static_cast<size_t>(nb) * kPackedBlock) {
    buf.resize(static_cast<size_t>(nb) * kPackedBlock);
  }
  for (int64_t r = 0; r < nrows; r += kLanes) {
    const FromInterleaved<U> src{{w + static_cast<size_t>(r / kLanes) * group_bytes}};
    if (unpack) {
      unpack16<U>(nb, src, buf.data());
      tokens16<U>(nb, FromPack{buf.data()}, a, as, nts, sides, static_cast<__mmask16>(0xFFFF),
                  y + r, ys);
    } else {
      tokens16<U>(nb, src, a, as, nts, sides, static_cast<__mmask16>(0xFFFF), y + r, ys);
    }
  }
}

// fn(std::type_identity<U>{}, type) for each legacy type and its unpacker (unsigned levels).
template <class Fn>
void each_legacy_type(Fn&& fn) {
  fn(std::type_identity<UnpackUQ8_0>{}, DType::Q8_0);
  fn(std::type_identity<UnpackUQ4_0>{}, DType::Q4_0);
  fn(std::type_identity<UnpackQ4_1>{}, DType::Q4_1);
  fn(std::type_identity<UnpackUQ5_0>{}, DType::Q5_0);
  fn(std::type_identity<UnpackQ5_1>{}, DType::Q5_1);
}

template <class U>
void add_interleaved(KernelOverrides* o, DType t) {
  GemmKernel& g = o->gemm[static_cast<size_t>(t)];
  g.interleaved_run = &phase_interleaved_run<U>;
  g.interleaved_prepare = &prepare_sides<U, IsaAvx512Vnni>;
  g.interleave_rows = kLanes;
}

// ---- avx512-amx: one tile product per block for many tokens ----
// The level above avx512-vnni on CPUs with AMX-INT8 whose OS grants this process the tile
// state. Only the interleaved legacy groups change, and only from kAmxMinTokens tokens
// (prefill, batches of 16 or more): a group is unpacked once into pack16's layout, whose 8
// level vectors of a block are exactly tdpbsud's B operand (8 rows of 16 x 4 unsigned bytes);
// its A operand is the block's activation bytes of M tokens, read in place (the rows'
// stride); one tdpbsud gives the M x 16 exact integer sums that M x 8 vpdpbusd give at
// avx512-vnni, stored, and scaled in the phase order of legacy_phase.h: every result is
// bit-identical to avx512-vnni's.
#pragma GCC push_options
#pragma GCC target("amx-tile,amx-int8")

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Two sets of tiles, so block i + 1's product can start while block i's sums are stored: set
// c is C = tmm<c>, A = tmm<c + 2>, B = tmm<c + 4>.
template <int M>
void configure_tiles() {
  TileConfig c;
  for (int i : {0, 1}) {
    c.rows[i] = M;  // C: M tokens x 16 int32
    c.colsb[i] = 64;
    c.rows[i + 2] = M;  // A: M tokens x 32 activation bytes
    c.colsb[i + 2] = kQK;
    c.rows[i + 4] = kQK / 4;  // B: 8 x (16 rows x 4 levels)
    c.colsb[i + 4] = 64;
  }
  asm volatile("" ::: "memory");  // ldtilecfg's asm names only the first 8 bytes as read
  _tile_loadconfig(&c);
}

// One block's sums through tile set C (tile numbers must be literals): out[t * 16 + r] = the
// block's sum of level(row r) x activation(token t).
template <int C>
[[gnu::always_inline]] inline void tile_block(const uint8_t* levels, const uint8_t* act, size_t as,
                                              int32_t* out) {
  if constexpr (C == 0) {
    _tile_loadd(4, levels, 64);
    _tile_loadd(2, act, as);
    _tile_zero(0);
    _tile_dpbsud(0, 2, 4);
    _tile_stored(0, out, 64);
  } else {
    _tile_loadd(5, levels, 64);
    _tile_loadd(3, act, as);
    _tile_zero(1);
    _tile_dpbsud(1, 3, 5);
    _tile_stored(1, out, 64);
  }
}

// M tokens (activations at a, sides[t]) against one unpacked group (lv), phases outside as in
// phased16_tokens, each block's sums from one tile product: the same terms into the same
// accumulators in the same order.
template <class U, int M>
void amx_tokens(int64_t nb, const uint8_t* lv, const uint8_t* a, size_t as, size_t q_stride,
                const ActSide* sides, float* y, size_t ys) {
  using P = Phase<U, IsaAvx512Vnni>;
  constexpr size_t kQsOff = P::kMin ? offsetof(BlockQ8_1, qs) : offsetof(BlockQ8_0, qs);
  alignas(64) int32_t sums[2][M * kLanes];
  const FromPack src{lv};
  __m512 out[M];
  phases_outside<M>(
      nb,
      [&](int, int64_t b, __m512* acc) {
        const uint8_t* pb = src.tile(b);
        const uint8_t* act = a + static_cast<size_t>(b) * q_stride + kQsOff;
        int32_t* s = sums[(b / kPhases) & 1];  // a pass's blocks alternate tile sets
        if ((b / kPhases) & 1) {
          tile_block<1>(pb, act, as, s);
        } else {
          tile_block<0>(pb, act, as, s);
        }
        const __m512 dw = FromPack::d(pb);
        EMBER_UNROLL
        for (int t = 0; t < M; ++t) {
          acc[t] = block_terms<U, FromPack>(_mm512_load_si512(s + t * kLanes), dw, pb, sides[t], b,
                                            acc[t]);
        }
      },
      out);
  EMBER_UNROLL
  for (int t = 0; t < M; ++t) _mm512_storeu_ps(y + static_cast<size_t>(t) * ys, out[t]);
}

// Below this many tokens the avx512-vnni kernels run: a group's unpacking and a block's tile
// store are paid per group and block, and at fewer tokens they cost more than the products save.
constexpr int64_t kAmxMinTokens = 16;

template <class U>
void amx_interleaved_run(int64_t n, const uint8_t* w, int64_t nrows, const uint8_t* a, size_t as,
                         int64_t nt, const void* prep, float* y, size_t ys) {
  if (nt < kAmxMinTokens) {
    phase_interleaved_run<U>(n, w, nrows, a, as, nt, prep, y, ys);
    return;
  }
  const int64_t nb = n / kQK;
  const size_t nbs = static_cast<size_t>(nb), nts = static_cast<size_t>(nt);
  const size_t q_stride = as / nbs;
  const auto* sides = static_cast<const ActSide*>(prep);
  const size_t group_bytes = nbs * FromInterleaved<U>::kTile;
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < nbs * kPackedBlock) buf.resize(nbs * kPackedBlock);
  int configured = 0;
  for (int64_t r = 0; r < nrows; r += kLanes) {
    const FromInterleaved<U> src{{w + static_cast<size_t>(r / kLanes) * group_bytes}};
    unpack16<U>(nb, src, buf.data());
    asm volatile("" ::: "memory");  // tileloadd's asm does not name the levels it reads
    size_t t = 0;
    auto chunk = [&](auto m) {
      constexpr int kM = decltype(m)::value;
      if (configured != kM) {
        configure_tiles<kM>();
        configured = kM;
      }
      amx_tokens<U, kM>(nb, buf.data(), a + t * as, as, q_stride, sides + t, y + r + t * ys, ys);
      t += kM;
    };
    while (nts - t >= 16) chunk(std::integral_constant<int, 16>{});
    if (nts - t >= 8) chunk(std::integral_constant<int, 8>{});
    if (nts - t >= 4) chunk(std::integral_constant<int, 4>{});
    if (t < nts) {
      tokens16<U>(nb, FromPack{buf.data()}, a + t * as, as, nts - t, sides + t,
                  static_cast<__mmask16>(0xFFFF), y + r + t * ys, ys);
    }
  }
  _tile_release();  // the thread's tile state back to its initial, unsaved form
}

template <class U>
void add_amx_interleaved(KernelOverrides* o, DType t) {
  o->gemm[static_cast<size_t>(t)].interleaved_run = &amx_interleaved_run<U>;
}

#pragma GCC pop_options

}  // namespace

// avx512-vnni's kernels with the interleaved runs replaced (apply() takes a gemm slot whole).
KernelOverrides amx_kernels() {
  KernelOverrides o;
  if (!cpu_has_amx()) return o;
  o = avx512_kernels();
  each_legacy_type(
      [&](auto u, DType t) { add_amx_interleaved<typename decltype(u)::type>(&o, t); });
  return o;
}

KernelOverrides avx512_kernels() {
  KernelOverrides o;
  if (!cpu_has_avx512_vnni()) return o;
  register_tiles<IsaAvx512Vnni>(&o, true);
  each_legacy_type([&](auto u, DType t) {
    using U = typename decltype(u)::type;
    add_phase_kernels<U, IsaAvx512Vnni>(&o, t, &phase_packed_run<U>, kLanes);
    add_interleaved<U>(&o, t);
  });
  add_k_packed<UnpackQ4_K>(&o, DType::Q4_K);
  add_k_packed<UnpackQ5_K>(&o, DType::Q5_K);
  add_k_packed<UnpackQ6_K>(&o, DType::Q6_K);
  add_avx512_activations(&o);
  return o;
}

}  // namespace ember::tensor::simd
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace ember::tensor::simd {
// AMX-TILE and AMX-INT8 (CPUID leaf 7: EDX bits 24 and 25), the tile state enabled by the OS
// (XCR0 bits 17 and 18), and this process granted it (Linux: arch_prctl(ARCH_REQ_XCOMP_PERM,
// XTILEDATA), once per process, for all its threads). Asked once.
bool cpu_has_amx() {
  static const bool ok = [] {
    if (!cpu_has_avx512_vnni()) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if ((edx & (3u << 24)) != (3u << 24)) return false;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return false;  // OSXSAVE
    unsigned lo = 0, hi = 0;
    asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return false;
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

bool cpu_has_avx512_vnni() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}
}  // namespace ember::tensor::simd
