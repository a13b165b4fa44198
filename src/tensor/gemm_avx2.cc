// The GEMM tiles of gemm_tiles.h compiled for AVX2 + FMA + F16C (16 ymm registers, so tiles of
// at most 4 weight rows x 2 tokens keep their accumulators in registers). Chosen at run time by
// quant.cc when the CPU has AVX2; they are also its vec_dot (the 1 x 1 tile).
#include <immintrin.h>

#include <algorithm>
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
// code is compiled for AVX2, so no inline function shared with scalar TUs gets AVX2 code.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "tensor/gemm_tiles.h"    // IWYU pragma: keep
#include "tensor/legacy_phase.h"  // IWYU pragma: keep

namespace ember::tensor::simd {
namespace {

struct IsaAvx2 {
  static constexpr int kMaxRows = 4, kMaxTokens = 2;
  // Rows per single-token (decode) tile. A multi-row tile reads its rows as interleaved
  // streams, which the hardware prefetcher follows far worse than one sequential stream: on
  // matrices larger than the last-level cache, in 2 MiB pages as the engine holds them
  // (kernels_bench, AMD EPYC Zen 4 VM, this level forced with EMBER_SIMD_LEVEL=avx2, medians of
  // two rounds, GB/s at 1 / 2 threads): Q8_0 262144x640 1 row 18.3 / 25.1, 2 rows 6.0 / 12.2;
  // Q6_K 65536x1024 1 row 15.9 / 20.9, 4 rows 2.8 / 5.7; Q4_K 65536x1024 1 row 13.7 / 19.7,
  // 4 rows 9.1 / 14.8. On a Zen 3 AVX2 VM (4 KiB pages then) Q8_0 one row was 11-13 ms against
  // 17-20 ms for 4. The legacy types run the kernels at the end of this file (one row at a time,
  // in their own float order).
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
  // 0x10 in each byte whose bit is set in the 32 bits at p.
  static __m256i bits_to_16(const uint8_t* p) {
    return _mm256_and_si256(tile_bits(p), _mm256_set1_epi8(0x10));
  }
  static __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static __m256i dot_s16(__m256i acc, __m256i x, __m256i y) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(x, y));
  }
  // fp16 d (low 16 bits of each 32-bit word of dm) of 8 blocks as floats.
  static __m256 d_of(__m256i dm) {
    const __m256i lo16 = _mm256_shuffle_epi8(
        dm, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5,
                             8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1));
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(lo16, 0x08)));
  }
  // fp16 (d, m) pairs of 8 blocks: d0 m0 .. d3 m3 and d4 m4 .. d7 m7 as floats; per 128-bit
  // lane the even (odd) words of both are d0 d1 d4 d5 | d2 d3 d6 d7, put in order by 64 bits.
  static void d_m_of(__m256i dm, __m256* d, __m256* m) {
    const __m256 f0 = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
    const __m256 f1 = _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1));
    *d = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(f0, f1, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
    *m = _mm256_castpd_ps(_mm256_permute4x64_pd(
        _mm256_castps_pd(_mm256_shuffle_ps(f0, f1, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
  }
};

// ---- packed paths for prefill ----
// K-type rows packed once per call (gemm_tiles.h: KPack), then R packed rows x T tokens per
// kernel call with the accumulators in registers. Per (row, token, super-block) the same
// integer and float operations as tile_k, in the same order: the results are bit-identical to
// the tiles' (and so to vec_dot), while the unpacking is paid once per row. The legacy types'
// prefill is at the end of this file.

using PackedRtFn = void (*)(int64_t n, const uint8_t* buf, int r0, const uint8_t* a, size_t as,
                            float* y, size_t ys);

// fn[R - 1][T - 1] = K::run<R, T>.
template <class K, int MR, int MT>
struct PackedTable {
  std::array<std::array<PackedRtFn, MT>, MR> fn{};
  constexpr PackedTable() { fill(std::make_integer_sequence<int, MR * MT>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / MT][I % MT] = &K::template run<I / MT + 1, I % MT + 1>), ...);
  }
};

// Token groups of MT outside, row groups of MR inside: the packed rows (a few KB) stay in L1
// while each group's activations are read once.
template <class K, int MR, int MT>
void packed_drive(int64_t n, const uint8_t* buf, int nr, const uint8_t* a, size_t as, int64_t nt,
                  float* y, size_t ys) {
  static constexpr PackedTable<K, MR, MT> table;
  for (int64_t t = 0; t < nt; t += MT) {
    const int tt = static_cast<int>(std::min<int64_t>(MT, nt - t));
    for (int r0 = 0; r0 < nr; r0 += MR) {
      const int rr = std::min(MR, nr - r0);
      table.fn[rr - 1][tt - 1](n, buf, r0, a + t * as, as, y + t * ys + r0, ys);
    }
  }
}

// K types against Q8_K (tile_k): dot = dy * (d * sum_k scale_k . (q_k * y_k) - dmin * mins).
template <class L>
struct KPacked {
  template <int R, int T>
  static void run(int64_t n, const uint8_t* buf, int r0, const uint8_t* a, size_t as, float* y,
                  size_t ys) {
    __m256 acc[R][T];
    zero_tile(acc);
    for (int64_t i = 0; i < n / kQKK; ++i) {
      const uint8_t* base = buf + i * L::kBlockBytes + r0 * L::kRowBytes;
      const BlockQ8_K* yb[T];
      EMBER_UNROLL
      for (int t = 0; t < T; ++t) yb[t] = reinterpret_cast<const BlockQ8_K*>(a + t * as) + i;
      __m256i sumi[R][T];
      EMBER_UNROLL
      for (auto& row : sumi) {
        EMBER_UNROLL
        for (auto& v : row) v = _mm256_setzero_si256();
      }
      EMBER_UNROLL
      for (int k = 0; k < 8; ++k) {
        __m256i qy[T];
        EMBER_UNROLL
        for (int t = 0; t < T; ++t) qy[t] = load256(yb[t]->qs + 32 * k);
        EMBER_UNROLL
        for (int r = 0; r < R; ++r) {
          const uint8_t* p = base + r * L::kRowBytes;
          const __m256i ux = load256(p + 32 * k);
          const __m256i sc = load256(p + L::kScOff + 32 * k);
          EMBER_UNROLL
          for (int t = 0; t < T; ++t) {
            sumi[r][t] = IsaAvx2::dot_s16(sumi[r][t], _mm256_maddubs_epi16(ux, qy[t]), sc);
            keep_in_register(sumi[r][t]);
          }
        }
      }
      EMBER_UNROLL
      for (int r = 0; r < R; ++r) {
        const uint8_t* p = base + r * L::kRowBytes;
        const __m256i m16 = load256(p + L::kMinOff);
        float dd[2];
        __builtin_memcpy(dd, p + L::kDOff, sizeof(dd));
        const __m256 d = _mm256_set1_ps(dd[0]), dmin = _mm256_set1_ps(dd[1]);
        EMBER_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(m16, load256(yb[t]->bsums)));
          const __m256 v =
              _mm256_fmsub_ps(d, _mm256_cvtepi32_ps(sumi[r][t]), _mm256_mul_ps(dmin, mins));
          acc[r][t] = _mm256_fmadd_ps(_mm256_set1_ps(yb[t]->d), v, acc[r][t]);
        }
      }
    }
    store_tile<R, T>(acc, y, ys);
  }
};

// Tile shape measured with kernels_bench (640x2048 and 2048x640, 64 tokens, one thread, on an
// AVX2 Zen 3 VM): K 2 x 4 was fastest of 1x3..2x4 / 1x8 (some accumulators spill; loads from L1
// are cheaper than the extra passes).
// The integer sums are pinned to their registers (keep_in_register): without it GCC spilled
// them (146 stack accesses for 136 multiplies in run<2, 4>); kernels_bench at avx2, Zen 5 VM,
// 1 thread, 6 paired rounds, 640x2048: Q4_K 8 tokens 227.5 -> 168 us, 64 tokens 1671 -> 1205.5;
// Q6_K 250.5 -> 193, 1731 -> 1252.5.
constexpr int kKPackRows = 4, kKR = 2, kKT = 4;

template <class U>
void add_k_packed(KernelOverrides* o, DType type) {
  using L = KPack<kKPackRows>;
  GemmKernel& g = o->gemm[static_cast<size_t>(type)];
  g.pack = &k_pack<U, L>;
  g.packed = &packed_drive<KPacked<L>, kKR, kKT>;
  g.pack_bytes = &L::bytes;
  g.pack_rows = kKPackRows;
  g.pack_min_tokens = 4;
}

// ---- the legacy types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) ----
// In the block-first float order of legacy_phase.h (its row side is this level's decode, tile
// and vec_dot), with this level's prefill path for that order: 8 rows are packed with row r's 4
// levels k..k+3 in 32-bit lane r (a transpose per block), so maddubs against broadcast
// activation words gives the 8 rows' block sums in the lanes, and one multiply and one FMA
// scale 8 (row, block) terms. Per (row, token) both compute the same exact integers and the
// same float operations in the same order, so the results are bit-identical whatever path a
// token takes (tests/tensor/gemm_test.cc).
//
// maddubs multiplies unsigned by signed bytes into saturating int16 pair sums; with levels
// below 32 and activations within +-127 a pair is at most 2 x 31 x 127 = 7,874, so four pair
// sums add in int16 without overflow (31,496) before one madd widens them. Q8_0 goes through
// the sign trick (|q| times q_a with q's sign; legacy_phase.h), whose pair sums (up to 32,512)
// are widened one by one.

// ---- prefill: 8 rows in the lanes ----
// Packed block b of 8 rows: 8 x 32 bytes of levels (vector k, 32-bit lane r: row r's levels
// 4k..4k+3; unsigned, or Q8_0's signed ones), 8 float d_w, 8 float m_w (types with a min; zero
// otherwise), and for Q8_0 the levels' absolute values in the same layout.
constexpr int kLanes = 8;
constexpr size_t kLevelBytes = 8 * 32, kDOff = kLevelBytes, kMOff = kDOff + 32;
constexpr size_t kAbsOff = kMOff + 32;
template <class P>
constexpr size_t kPackedBlock = P::kSigned ? kAbsOff + kLevelBytes : kAbsOff;

template <class U>
void pack8(int64_t nb, const uint8_t* w, size_t ws, int nr, uint8_t* buf) {
  using P = Phase<U, IsaAvx2>;
  using B = typename P::B;
  for (int64_t b = 0; b < nb; ++b) {
    prefetch_slice(w + kLanes * ws, kLanes * ws, nb, b);  // the next 8 rows (contiguous)
    uint8_t* pb = buf + static_cast<size_t>(b) * kPackedBlock<P>;
    alignas(16) uint16_t d16[kLanes] = {}, m16[kLanes] = {};
    __m256i r[8];
    EMBER_UNROLL
    for (int i = 0; i < kLanes; ++i) {
      if (i < nr) {
        const B& blk = reinterpret_cast<const B*>(w + static_cast<size_t>(i) * ws)[b];
        d16[i] = blk.d;
        if constexpr (P::kMin) m16[i] = blk.m;
        r[i] = P::levels(blk);
      } else {
        r[i] = _mm256_setzero_si256();
      }
    }
    // 8 x 8 transpose of 32-bit words: out[k] lane i = row i's word k.
    __m256i t[8], u[8];
    EMBER_UNROLL
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    EMBER_UNROLL
    for (int h = 0; h < 8; h += 4) {
      u[h] = _mm256_unpacklo_epi64(t[h], t[h + 2]);
      u[h + 1] = _mm256_unpackhi_epi64(t[h], t[h + 2]);
      u[h + 2] = _mm256_unpacklo_epi64(t[h + 1], t[h + 3]);
      u[h + 3] = _mm256_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    // u[m] (rows 0..3) and u[4 + m] (rows 4..7), 128-bit lane c: word 4c + m.
    EMBER_UNROLL
    for (int m = 0; m < 4; ++m) {
      const __m256i lo = _mm256_permute2x128_si256(u[m], u[4 + m], 0x20);
      const __m256i hi = _mm256_permute2x128_si256(u[m], u[4 + m], 0x31);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 * m), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 * (4 + m)), hi);
      if constexpr (P::kSigned) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + kAbsOff + 32 * m),
                            _mm256_sign_epi8(lo, lo));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + kAbsOff + 32 * (4 + m)),
                            _mm256_sign_epi8(hi, hi));
      }
    }
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + kDOff),
                     _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d16))));
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + kMOff),
                     _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(m16))));
  }
}

inline __m256i bcast32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, sizeof v);
  return _mm256_set1_epi32(v);
}

// Block b's operands for 8 rows in pack8's layout (the run-time pack, or an interleaved group
// unpacked by unpack8): the levels as 8 vectors (vector k, 32-bit lane r: row r's levels
// 4k..4k+3), Q8_0's absolute values the same way, d_w and m_w as 8 floats.
template <class P>
struct FromPack8 {
  const uint8_t* buf;
  const uint8_t* tile(int64_t b) const { return buf + static_cast<size_t>(b) * kPackedBlock<P>; }
  void prefetch(int64_t) const {}  // the pack is in L1
  static __m256i levels(const uint8_t* pb, int k) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32 * k));
  }
  static __m256i abs_levels(const uint8_t* pb, int k, __m256i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + kAbsOff + 32 * k));
  }
  static __m256 d(const uint8_t* pb) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kDOff));
  }
  static __m256 m(const uint8_t* pb) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(pb + kMOff));
  }
};

// A group of 8 rows in the interleaved layout (tensor/interleave.h): the fp16 scales, then the
// rows' quant words side by side (Q8_0: the signed levels; the 4- and 5-bit types: word k's
// low nibbles are levels 4k..4k+3, its high nibbles levels 16+4k..16+4k+3, and the reordered
// fifth-bit word holds vector k's fifth bits at bit k of each byte).
template <class U>
struct FromInterleaved8 : InterleavedGroup<U, kLanes> {
  using G = InterleavedGroup<U, kLanes>;
  using typename G::B;
  static __m256i levels(const uint8_t* pb, int k) {
    if constexpr (std::is_same_v<B, BlockQ8_0>) {
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + G::kWords + 32 * k));
    } else {
      const __m256i raw =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + G::kWords + 32 * (k & 3)));
      const __m256i lo4 = _mm256_set1_epi8(0x0F);
      const __m256i nib =
          k < 4 ? _mm256_and_si256(raw, lo4) : _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
      if constexpr (!G::kQh) {
        return nib;
      } else {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + G::kQhOff));
        const __m256i at4 = k <= 4 ? _mm256_slli_epi32(qh, 4 - k) : _mm256_srli_epi32(qh, k - 4);
        return _mm256_or_si256(nib, _mm256_and_si256(at4, _mm256_set1_epi8(0x10)));
      }
    }
  }
  static __m256i abs_levels(const uint8_t*, int, __m256i wk) { return _mm256_sign_epi8(wk, wk); }
  static __m256 d(const uint8_t* pb) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb)));
  }
  static __m256 m(const uint8_t* pb) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + 16)));
  }
};

// The first nr lanes of v at yt.
inline void store_lanes(__m256 v, int nr, float* yt) {
  if (nr == kLanes) {
    _mm256_storeu_ps(yt, v);
  } else {
    alignas(32) float out[kLanes];
    _mm256_store_ps(out, v);
    std::copy(out, out + nr, yt);
  }
}

// T tokens against 8 rows at src (an interleaved group, or pack8's layout) at once: lane r of
// token t's result = row r's dot product with token t, stored at y + t * ys (the first nr
// lanes). Each level vector is loaded (or unpacked) once for the T tokens. The accumulators, 8
// per token (one per phase), stay in registers: at T = 1 all eight, the blocks in memory order
// (T = 2 the same: kPhasesOutside below); from 3, one phase's T at a time, the blocks of each
// phase in turn (from L1: a group is a few KB). With all 8T in memory, updated in place per block,
// kernels_bench at avx2 (Zen 5 VM, 1 thread, 8 paired rounds, 8 tokens) was 8.7% slower on Q4_1
// 640x2048 (126 vs 115.5 us) and 1.5% on Q8_0 2048x640; eight tokens in one pass instead of two
// fours, 12% slower (the registers spill). From T = 3 each token's integer sum is also pinned to
// its register after every step (keep_in_register): GCC had reassociated the sums, computing a
// block's 32 products first and spilling most of them to the stack. Pinned, and the phase loop left
// rolled (6 paired rounds, same host, us): 8 tokens Q4_1 640x2048 135 -> 103, 2048x640 127.5 ->
// 103.5, Q8_0 2048x640 182.5 -> 141.5; 64 tokens Q4_1 640x2048 984 -> 760, Q8_0 1416 -> 1164;
// `ember bench -c 8 --simd-level avx2` +16.5% on SmolLM2 (10 rounds, 9 faster) and +15% on Gemma (6
// of 6). Every T computes per (row, token) the same exact integers and the same float operations in
// the same order, so the results are bit-identical whatever the batch. kernels_bench at avx2 on an
// Intel Xeon (AVX-512 host, 1 thread, 2 paired rounds, one token at a time against 4): Q4_1
// 1536x576 at 64 tokens 857-871 vs 808-828 us, Q4_1 131072x576 at 8 tokens 10.6-11.1 vs 10.4-10.6
// ms, Q8_0 262144x640 at 8 tokens 40.7-40.8 vs 39.5-40.6 ms: the loads were not what bound it; the
// vector ALU work per block (maddubs, its int16 sums, and the per-block float terms that keep
// every path's order) is.
template <class U, int T, class Src>
void packed8_tokens(int64_t nb, const Src& src, const uint8_t* a, size_t as, size_t q_stride,
                    const ActSide* sides, int nr, float* y, size_t ys) {
  using P = Phase<U, IsaAvx2>;
  // The activation bytes sit after the block's scale words.
  constexpr size_t kQsOff = P::kMin ? offsetof(BlockQ8_1, qs) : offsetof(BlockQ8_0, qs);
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* q[T];
  const float* da[T];
  const float* sa[T];
  const int32_t* corr[T];
  EMBER_UNROLL
  for (int t = 0; t < T; ++t) {
    q[t] = a + static_cast<size_t>(t) * as + kQsOff;
    da[t] = sides[t].d.data();
    sa[t] = sides[t].s.data();
    corr[t] = sides[t].corr.data();
  }
  // From 3 tokens the phases go outside (below); up to 2 the blocks run in memory order, all 8T
  // accumulators live, the sums not pinned. From memory (kernels_bench at avx2, 2 threads, 5
  // paired rounds, ms): at 2 tokens memory order was faster, Q8_0 262144x640 5.40 -> 4.46, Q4_1
  // 131072x576 1.26 -> 1.03 (pinned too: 4.25, 1.11); at 3 tokens slower, 4.65 -> 4.72 and 1.26
  // -> 1.58; at 8 tokens (two passes of 4) much slower, 10.3 -> 12.2 and 3.76 -> 4.31 (pinned).
  constexpr bool kPhasesOutside = T >= 3;
  // Block b's term for every token, added to acc[t].
  const auto block = [&](int64_t b, __m256* acc) {
    src.prefetch(b);
    const uint8_t* pb = src.tile(b);
    const size_t qo = static_cast<size_t>(b) * q_stride;
    __m256i s[T];
    if constexpr (P::kSigned) {
      EMBER_UNROLL
      for (int t = 0; t < T; ++t) s[t] = _mm256_setzero_si256();
      // Q8_0 pair sums reach 32,512: each widened on its own.
      EMBER_UNROLL
      for (int k = 0; k < 8; ++k) {
        const __m256i wk = Src::levels(pb, k);
        const __m256i ak = Src::abs_levels(pb, k, wk);
        EMBER_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i yk = _mm256_sign_epi8(bcast32(q[t] + qo + 4 * k), wk);
          s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(ak, yk), ones));
          if constexpr (kPhasesOutside) keep_in_register(s[t]);
        }
      }
    } else {
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        __m256i t16[T];
        EMBER_UNROLL
        for (int t = 0; t < T; ++t) t16[t] = _mm256_setzero_si256();
        EMBER_UNROLL
        for (int k = 4 * h; k < 4 * h + 4; ++k) {
          const __m256i wk = Src::levels(pb, k);
          EMBER_UNROLL
          for (int t = 0; t < T; ++t) {
            t16[t] = _mm256_add_epi16(t16[t], _mm256_maddubs_epi16(wk, bcast32(q[t] + qo + 4 * k)));
            if constexpr (kPhasesOutside) keep_in_register(t16[t]);
          }
        }
        EMBER_UNROLL
        for (int t = 0; t < T; ++t) {
          const __m256i w32 = _mm256_madd_epi16(t16[t], ones);
          s[t] = h == 0 ? w32 : _mm256_add_epi32(s[t], w32);
        }
      }
    }
    const __m256 dw = Src::d(pb);
    EMBER_UNROLL
    for (int t = 0; t < T; ++t) {
      __m256i st = s[t];
      // Q8_0's sign trick and the types with a min need no offset correction.
      if constexpr (P::kOffset != 0) st = _mm256_add_epi32(st, _mm256_set1_epi32(corr[t][b]));
      const __m256 sc = _mm256_mul_ps(dw, _mm256_set1_ps(da[t][b]));
      acc[t] = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(st), acc[t]);
      if constexpr (P::kMin) acc[t] = _mm256_fmadd_ps(Src::m(pb), _mm256_set1_ps(sa[t][b]), acc[t]);
    }
  };
  // Phase j accumulates blocks j, j + 8, ... (legacy_phase.h's float order).
  __m256 phase[kPhases][T];
  if constexpr (!kPhasesOutside) {
    // One or two tokens: blocks in memory order (the weights stream from memory), the eight
    // phases' accumulators in registers.
    EMBER_UNROLL
    for (auto& row : phase) {
      EMBER_UNROLL
      for (auto& v : row) v = _mm256_setzero_ps();
    }
    for (int64_t g = 0; g < nb; g += kPhases) {
      EMBER_UNROLL
      for (int j = 0; j < kPhases; ++j) {
        if (g + j >= nb) break;
        block(g + j, phase[j]);
      }
    }
  } else {
    // Three tokens or more: one phase at a time, so its T accumulators stay in registers (all 8T of
    // them would not); the group is small enough to stay in L1 across the phases. Not unrolled:
    // one copy of the body is what the register allocator handles best (kernels_bench below).
    EMBER_NO_UNROLL
    for (int j = 0; j < kPhases; ++j) {
      __m256 acc[T];
      EMBER_UNROLL
      for (auto& v : acc) v = _mm256_setzero_ps();
      for (int64_t b = j; b < nb; b += kPhases) block(b, acc);
      EMBER_UNROLL
      for (int t = 0; t < T; ++t) phase[j][t] = acc[t];
    }
  }
  EMBER_UNROLL
  for (int t = 0; t < T; ++t) {
    const auto v = [&](int j) { return phase[j][t]; };
    store_lanes(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(v(0), v(4)), _mm256_add_ps(v(2), v(6))),
                              _mm256_add_ps(_mm256_add_ps(v(1), v(5)), _mm256_add_ps(v(3), v(7)))),
                nr, y + static_cast<size_t>(t) * ys);
  }
}

// Every token against 8 rows at src (unpacked, or an interleaved group), kTokenBlock at a time.
constexpr int kTokenBlock = 4;
template <class U, class Src>
void tokens8_blocks(int64_t nb, const Src& src, const uint8_t* a, size_t as, size_t nt,
                    const ActSide* sides, int nr, float* y, size_t ys) {
  const size_t q_stride = as / static_cast<size_t>(nb);
  for_token_blocks<kTokenBlock>(nt, [&](auto n, size_t t) {
    packed8_tokens<U, decltype(n)::value>(nb, src, a + t * as, as, q_stride, sides + t, nr,
                                          y + t * ys, ys);
  });
}

// A run of rows (a matmul task) against nt tokens: the activation side once per token, then
// blocks of 8 rows packed into L1 scratch and dotted against every token.
template <class U>
void phase_packed_run_avx2(int64_t n, const uint8_t* w, size_t ws, int64_t nrows, const uint8_t* a,
                           size_t as, int64_t nt, float* y, size_t ys) {
  using P = Phase<U, IsaAvx2>;
  const int64_t nb = n / kQK;
  const size_t nbs = static_cast<size_t>(nb), nts = static_cast<size_t>(nt);
  const ActSide* sides = act_sides<U, IsaAvx2>(nb, a, as, nts);
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < nbs * kPackedBlock<P>) buf.resize(nbs * kPackedBlock<P>);
  for (int64_t r = 0; r < nrows; r += kLanes) {
    const int nr = static_cast<int>(std::min<int64_t>(kLanes, nrows - r));
    pack8<U>(nb, w + static_cast<size_t>(r) * ws, ws, nr, buf.data());
    tokens8_blocks<U>(nb, FromPack8<P>{buf.data()}, a, as, nts, sides, nr, y + r, ys);
  }
}

// An interleaved group's levels unpacked into pack8's layout (no transpose: the words are
// already in lanes), so that each block of tokens reads them as they are instead of unpacking
// them again. When the kernel took one token per pass this won everywhere (Zen 4, Q4_1
// 131072x576 at 8 tokens 12.2 vs 14.7 ms read directly); with 4 tokens per pass it wins only
// where noted at phase_interleaved_run_avx2.
template <class U>
void unpack8(int64_t nb, const FromInterleaved8<U>& src, uint8_t* buf) {
  using P = Phase<U, IsaAvx2>;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tl = src.tile(b);
    prefetch_next_group(tl, static_cast<size_t>(nb) * FromInterleaved8<U>::kTile,
                        FromInterleaved8<U>::kTile);
    uint8_t* pb = buf + static_cast<size_t>(b) * kPackedBlock<P>;
    EMBER_UNROLL
    for (int k = 0; k < 8; ++k) {
      const __m256i wk = FromInterleaved8<U>::levels(tl, k);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + 32 * k), wk);
      if constexpr (P::kSigned) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + kAbsOff + 32 * k),
                            _mm256_sign_epi8(wk, wk));
      }
    }
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + kDOff), FromInterleaved8<U>::d(tl));
    _mm256_storeu_ps(reinterpret_cast<float*>(pb + kMOff),
                     P::kMin ? FromInterleaved8<U>::m(tl) : _mm256_setzero_ps());
  }
}

// The same for whole groups of 8 interleaved rows: read directly (the levels unpacked in
// registers, once per block of 4 tokens), except that the 5-bit types from kUnpack8Tokens5Bit
// tokens, and the others from kUnpack8Tokens, first unpack a group once into pack8's layout.
// EMBER_SIMD_LEVEL=avx2 kernels_bench on an Intel Xeon VM, 1 thread, paired rounds, unpacked vs
// direct: Q8_0 262144x640 at 8 tokens 35.7-42.1 vs 27.5-29.0 ms, 2048x640 at 8 tokens 235-255 vs
// 181-201 us; Q4_1 131072x576 at 8 tokens 9.4-9.9 vs 8.0-8.8 ms, 576x1536 at 8 tokens 114-116 vs
// 94-95 us, but 1536x576 at 64 tokens 692-717 vs 760-791 us; Q5_0 1024x640 at 64 tokens 493-550 vs
// 612-643 us (its fifth bits cost four more operations per vector and block of tokens). From 16
// to 63 tokens direct is still the faster (same host kind, a later draw, 2 paired rounds,
// unpacked from 16 vs from 64, us): at 16 tokens Q8_0 640x2048 418-446 vs 351-357, Q4_1
// 4096x4096 3395-3424 vs 2962-2995, 1536x576 172-173 vs 162-167; at 32 tokens Q8_0 640x2048
// 776-782 vs 703-728, Q4_1 4096x4096 6219-6276 vs 5679-5868, 1536x576 332 vs 332-335.
// The 5-bit types were unpacked from 2 tokens until c3a3dd8 (2026-12-04); direct is faster up
// to 8 at least (Zen 3 host, 2 threads, 8 tokens, 6 interleaved rounds, us, unpacked vs direct,
// paired median, 5 of 6 faster each: Q5_0 640x2048 112.5 vs 101.1, 0.88; 2048x640 110.0 vs
// 102.0, 0.95; 1024x640 59.2 vs 55.3, 0.93; 131072x640 7324 vs 6149, 0.87) and mostly slower
// from 16 (4 rounds: 2048x640 at 16 tokens 158-214 vs 183-239, at 32 321-412 vs 364-505;
// 1024x640 at 16 86-107 vs 92-129; 640x2048 at 32 326-458 vs 355-532).
constexpr int64_t kUnpack8Tokens = 64;
constexpr int64_t kUnpack8Tokens5Bit = 16;
template <class U>
void phase_interleaved_run_avx2(int64_t n, const uint8_t* w, int64_t nrows, const uint8_t* a,
                                size_t as, int64_t nt, const void* prep, float* y, size_t ys) {
  using P = Phase<U, IsaAvx2>;
  const int64_t nb = n / kQK;
  const size_t nts = static_cast<size_t>(nt);
  const auto* sides = static_cast<const ActSide*>(prep);
  const size_t group_bytes = static_cast<size_t>(nb) * FromInterleaved8<U>::kTile;
  const bool unpack =
      nt > 1 && nt >= (FromInterleaved8<U>::kQh ? kUnpack8Tokens5Bit : kUnpack8Tokens);
  thread_local std::vector<uint8_t> buf;
  if (unpack && buf.size() < static_cast<size_t>(nb) * kPackedBlock<P>) {
    buf.resize(static_cast<size_t>(nb) * kPackedBlock<P>);
  }
  for (int64_t r = 0; r < nrows; r += kLanes) {
    const FromInterleaved8<U> src{{w + static_cast<size_t>(r / kLanes) * group_bytes}};
    if (nt == 1) {
      packed8_tokens<U, 1>(nb, src, a, as, as / static_cast<size_t>(nb), sides, kLanes, y + r, ys);
    } else {
      if (unpack) {
        unpack8<U>(nb, src, buf.data());
        tokens8_blocks<U>(nb, FromPack8<P>{buf.data()}, a, as, nts, sides, kLanes, y + r, ys);
      } else {
        tokens8_blocks<U>(nb, src, a, as, nts, sides, kLanes, y + r, ys);
      }
    }
  }
}

template <class U>
void add_interleaved_avx2(KernelOverrides* o, DType t) {
  GemmKernel& g = o->gemm[static_cast<size_t>(t)];
  g.interleaved_run = &phase_interleaved_run_avx2<U>;
  g.interleaved_prepare = &prepare_sides<U, IsaAvx2>;
  g.interleave_rows = kLanes;
}

}  // namespace

// vec_dot is the 1 x 1 tile: every output, whatever the tile it comes from, accumulates in the
// same order, so a token's results do not depend on the batch (decode vs prefill, prefix-cache
// hit or miss) and equal vec_dot of the row with its quantized activation.
void add_avx2_gemm(KernelOverrides* o) {
  register_tiles<IsaAvx2>(o, true);
  add_phase_kernels<UnpackQ8_0, IsaAvx2>(o, DType::Q8_0, &phase_packed_run_avx2<UnpackQ8_0>,
                                         kLanes);
  add_phase_kernels<UnpackUQ4_0, IsaAvx2>(o, DType::Q4_0, &phase_packed_run_avx2<UnpackUQ4_0>,
                                          kLanes);
  add_phase_kernels<UnpackUQ5_0, IsaAvx2>(o, DType::Q5_0, &phase_packed_run_avx2<UnpackUQ5_0>,
                                          kLanes);
  add_phase_kernels<UnpackQ4_1, IsaAvx2>(o, DType::Q4_1, &phase_packed_run_avx2<UnpackQ4_1>,
                                         kLanes);
  add_phase_kernels<UnpackQ5_1, IsaAvx2>(o, DType::Q5_1, &phase_packed_run_avx2<UnpackQ5_1>,
                                         kLanes);
  add_interleaved_avx2<UnpackQ8_0>(o, DType::Q8_0);
  add_interleaved_avx2<UnpackUQ4_0>(o, DType::Q4_0);
  add_interleaved_avx2<UnpackQ4_1>(o, DType::Q4_1);
  add_interleaved_avx2<UnpackUQ5_0>(o, DType::Q5_0);
  add_interleaved_avx2<UnpackQ5_1>(o, DType::Q5_1);
  add_k_packed<UnpackQ4_K>(o, DType::Q4_K);
  add_k_packed<UnpackQ5_K>(o, DType::Q5_K);
  add_k_packed<UnpackQ6_K>(o, DType::Q6_K);
}

}  // namespace ember::tensor::simd
#pragma GCC pop_options
