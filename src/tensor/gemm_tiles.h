// GEMM micro-kernels ("tiles"): a block of NR weight rows times NT activation rows, with the
// NR x NT accumulators kept in registers so each weight block is loaded and unpacked once for
// NT tokens (and each activation block once for NR rows), for the float and K types (the legacy
// types' kernels are in legacy_phase.h, which uses the level unpackers below). Written once as
// templates over an ISA policy (Isa::dot_s16 adds 2 s16*s16 products into each int32 lane)
// and instantiated by the translation units that include this header after their
// `#pragma GCC target` (gemm_avx2.cc, quant_avx512.cc). Everything here has internal linkage,
// so each including TU gets its own copy compiled for its target.
//
// Results equal the scalar references up to the order of float additions: integer dot products
// are exact, each block's integer sum is scaled by the same float factors, and sums of blocks
// are accumulated per lane in float.
//
// Tile signature (all tiles of all types): y[t * y_stride + r] = dot(W row r, A row t) for
// r < nr, t < nt, n elements; W rows are w_stride bytes apart, A rows a_stride bytes apart.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

// Loops over tile rows / tokens / sub-blocks must unroll completely, or the accumulator arrays
// live on the stack instead of in registers (GCC -O2 leaves them rolled).
#define EMBER_UNROLL _Pragma("GCC unroll 16")
// A loop whose body the register allocator handles best as one copy.
#define EMBER_NO_UNROLL _Pragma("GCC unroll 1")

namespace ember::tensor::simd {
namespace {  // NOLINT: deliberately one private copy per including TU (different targets)

// An empty asm that takes v in a register and gives it back: the compiler can no longer
// reassociate an integer sum accumulated step by step (GCC otherwise computed all of a block's
// products first and added them as a tree, spilling most of them to the stack; the avx2
// multi-token kernels in gemm_avx2.cc measured 15-29% faster pinned; tile_k at avx2, 1 thread,
// 6 paired rounds, 640x2048 at 2 and 3 tokens: Q4_K 78.6 -> 67.0 and 126.5 -> 101.5 us, Q6_K
// 94.7 -> 80.2 and 158.5 -> 133.0; at avx512-vnni within 3% either way).
inline void keep_in_register(__m256i& v) {
  asm("" : "+x"(v));
}

inline float tile_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float h2f(uint16_t h) {
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Software prefetch of the rows a few tiles further on (matmul lays tiles out contiguously): with
// short rows (a 640-column Q8_0 row is 11 cache lines) the hardware prefetcher does not keep up
// with NR interleaved streams that each end before it has trained. Past the matrix end it is a
// harmless no-op.
// Four tiles ahead measured best (2 and 8 were within noise, 4 up to 15% better on the
// 262144-row output projection).
constexpr int kPrefetchTiles = 4;

template <int NR>
inline void prefetch_ahead(const uint8_t* w, size_t ws, size_t offset) {
  const uint8_t* p = w + kPrefetchTiles * NR * ws + offset;
  EMBER_UNROLL
  for (int r = 0; r < NR; ++r) _mm_prefetch(reinterpret_cast<const char*>(p + r * ws), _MM_HINT_T0);
}

template <int NR, int NT>
inline void zero_tile(__m256 (&acc)[NR][NT]) {
  EMBER_UNROLL
  for (int r = 0; r < NR; ++r) {
    EMBER_UNROLL
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  }
}

// NR x NT float accumulators -> y.
template <int NR, int NT>
inline void store_tile(__m256 (&acc)[NR][NT], float* y, size_t y_stride) {
  EMBER_UNROLL
  for (int r = 0; r < NR; ++r) {
    EMBER_UNROLL
    for (int t = 0; t < NT; ++t) y[t * y_stride + r] = tile_hsum(acc[r][t]);
  }
}

// ---- float weights (F32 x F32, F16 x F16) ----

struct LoadF32 {
  using Elem = float;
  static __m256 load(const float* p) { return _mm256_loadu_ps(p); }
  static float scalar(float v) { return v; }
};
struct LoadF16 {
  using Elem = uint16_t;
  static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float scalar(uint16_t v) { return h2f(v); }
};

struct LoadBF16 {
  using Elem = uint16_t;
  static __m256 load(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float scalar(uint16_t v) { return bfloat_to_float(v); }
};

template <class L, int NR, int NT>
void tile_float(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y,
                size_t ys) {
  using E = typename L::Elem;
  __m256 acc[NR][NT];
  zero_tile(acc);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (i % 16 == 0) prefetch_ahead<NR>(w, ws, i * sizeof(E));
    __m256 wv[NR];
    EMBER_UNROLL
    for (int r = 0; r < NR; ++r) wv[r] = L::load(reinterpret_cast<const E*>(w + r * ws) + i);
    EMBER_UNROLL
    for (int t = 0; t < NT; ++t) {
      const __m256 av = L::load(reinterpret_cast<const E*>(a + t * as) + i);
      EMBER_UNROLL
      for (int r = 0; r < NR; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], av, acc[r][t]);
    }
  }
  store_tile<NR, NT>(acc, y, ys);
  for (; i < n; ++i) {
    EMBER_UNROLL
    for (int r = 0; r < NR; ++r) {
      EMBER_UNROLL
      for (int t = 0; t < NT; ++t) {
        y[t * ys + r] += L::scalar(reinterpret_cast<const E*>(w + r * ws)[i]) *
                         L::scalar(reinterpret_cast<const E*>(a + t * as)[i]);
      }
    }
  }
}

// ---- legacy 32-element blocks: their levels, for legacy_phase.h ----
// Each unpacker yields a block's 32 levels, element order, in one vector.

// 16 bytes of nibbles -> 32 bytes: low nibbles first (elements 0..15), then high (16..31).
// (The 16 bytes broadcast to both halves, the high half shifted by 4: three instructions, one
// fewer than shifting a copy and inserting it; the decode tiles are instruction-bound.)
inline __m256i tile_nibbles(const uint8_t* p) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256i shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
  return _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F));
}

// 32 bits -> 32 bytes: 0xFF where the bit is set.
inline __m256i tile_bits(const uint8_t* p) {
  uint32_t bits;
  __builtin_memcpy(&bits, p, 4);
  const __m256i shuf =
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
}

// Signed levels q (Q8_0 as stored), for a level without exact u8 x s8 products at 255.
struct UnpackQ8_0 {
  using Block = BlockQ8_0;
  static __m256i levels(const Block& b) { return load256(b.qs); }
};

// Unsigned levels u = q + kOffset in [0, 255]: sum(q * y) = sum(u * y) - kOffset * sum(y).
struct UnpackUQ8_0 {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 128;
  template <class Isa>
  static __m256i levels(const Block& b) {
    return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
  }
};
struct UnpackUQ4_0 {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  template <class Isa>
  static __m256i levels(const Block& b) {
    return tile_nibbles(b.qs);
  }
};
struct UnpackUQ5_0 {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  template <class Isa>
  static __m256i levels(const Block& b) {
    return _mm256_or_si256(tile_nibbles(b.qs), Isa::bits_to_16(b.qh));
  }
};

// Q4_1 / Q5_1 (x = d * q + m): their unsigned levels q.
struct UnpackQ4_1 {
  using Block = BlockQ4_1;
  template <class Isa>
  static __m256i levels(const Block& b) {
    return tile_nibbles(b.qs);
  }
};
struct UnpackQ5_1 {
  using Block = BlockQ5_1;
  template <class Isa>
  static __m256i levels(const Block& b) {
    return _mm256_or_si256(tile_nibbles(b.qs), Isa::bits_to_16(b.qh));
  }
};

// ---- K types against Q8_K activations ----
// Every K type unpacks a super-block into 8 vectors of 32 unsigned levels (< 64, so a maddubs
// pair sum cannot saturate), 8 vectors of int16 scales matching the levels' lanes, and 16 int16
// "min" factors m[j] against the activation's 16 bsums, such that
//   dot = dy * (d * sum_k scale_k . (q_k * y_k) - dmin * sum_j m[j] * bsums[j]).
// (Q6_K's "- 32" offset becomes m = scales, dmin = 32 d.)
struct KUnpacked {
  __m256i q[8];
  __m256i sc[8];
  __m256i m16;
  __m256 d, dmin;
};

// Q4_K / Q5_K: 8 sub-blocks of 32, vector k is sub-block k. The 12 scale bytes hold 8 6-bit
// scales and 8 6-bit mins (see k_scale_min); they are unpacked four at a time in 32-bit words.
inline void k_set_32(KUnpacked* u, const uint8_t* scales, uint16_t d, uint16_t dmin) {
  uint32_t w[3];
  __builtin_memcpy(w, scales, 12);
  const uint32_t sc_lo = w[0] & 0x3f3f3f3f, mn_lo = w[1] & 0x3f3f3f3f;
  const uint32_t sc_hi = (w[2] & 0x0f0f0f0f) | ((w[0] >> 2) & 0x30303030);
  const uint32_t mn_hi = ((w[2] >> 4) & 0x0f0f0f0f) | ((w[1] >> 2) & 0x30303030);
  const __m128i sc8 = _mm_cvtsi64_si128(static_cast<int64_t>(sc_lo | uint64_t{sc_hi} << 32));
  const __m128i mn8 = _mm_cvtsi64_si128(static_cast<int64_t>(mn_lo | uint64_t{mn_hi} << 32));
  const __m256i sc16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sc8));
  EMBER_UNROLL
  for (int k = 0; k < 8; ++k) {  // int16 element k everywhere
    u->sc[k] =
        _mm256_shuffle_epi8(sc16, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * k)));
  }
  u->m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mn8, mn8));  // mn[j] against bsums 2j, 2j+1
  u->d = _mm256_set1_ps(h2f(d));
  u->dmin = _mm256_set1_ps(h2f(dmin));
}

struct UnpackQ4_K {
  using Block = BlockQ4_K;
  static void unpack(const Block& b, KUnpacked* u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    EMBER_UNROLL
    for (int j = 0; j < 4; ++j) {
      const __m256i q4 = load256(b.qs + 32 * j);
      u->q[2 * j] = _mm256_and_si256(q4, m4);
      u->q[2 * j + 1] = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
    }
    k_set_32(u, b.scales, b.d, b.dmin);
  }
};

struct UnpackQ5_K {
  using Block = BlockQ5_K;
  static void unpack(const Block& b, KUnpacked* u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i qh = load256(b.qh);
    EMBER_UNROLL
    for (int j = 0; j < 4; ++j) {
      const __m256i q4 = load256(b.qs + 32 * j);
      // Bit 2j of qh[l] is the 5th bit of element 64j + l, bit 2j+1 that of 64j + 32 + l.
      const __m256i h0 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), _mm256_set1_epi8(1));
      const __m256i h1 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), _mm256_set1_epi8(1));
      u->q[2 * j] = _mm256_or_si256(_mm256_and_si256(q4, m4), _mm256_slli_epi16(h0, 4));
      u->q[2 * j + 1] =
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q4, 4), m4), _mm256_slli_epi16(h1, 4));
    }
    k_set_32(u, b.scales, b.d, b.dmin);
  }
};

struct UnpackQ6_K {
  using Block = BlockQ6_K;
  static void unpack(const Block& b, KUnpacked* u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(0x03);
    EMBER_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = load256(b.ql + 64 * h);
      const __m256i l1 = load256(b.ql + 64 * h + 32);
      const __m256i qh = load256(b.qh + 32 * h);
      __m256i* q = u->q + 4 * h;  // vector 4h + k covers elements 128h + 32k .. + 31
      q[0] =
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m3), 4));
      q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m3), 4));
      q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m3), 4));
      q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                             _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m3), 4));
    }
    // Sub-blocks of 16: scale 2k in the low lane, 2k+1 in the high one, picked by per-lane byte
    // shuffles from the 16 scales widened to int16 (0..7 in one half, 8..15 in the other).
    u->m16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    const __m256i lo = _mm256_permute2x128_si256(u->m16, u->m16, 0x00);
    const __m256i hi = _mm256_permute2x128_si256(u->m16, u->m16, 0x11);
    EMBER_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int e = 2 * (k % 4);  // element of the half holding scales 2k, 2k+1
      const __m256i pick =
          _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (e + 1))),
                           _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * e)));
      u->sc[k] = _mm256_shuffle_epi8(k < 4 ? lo : hi, pick);
    }
    const float d = h2f(b.d);
    u->d = _mm256_set1_ps(d);
    u->dmin = _mm256_set1_ps(32 * d);
  }
};

// Q2_K: 2-bit levels, 16 sub-blocks of 16 with a 4-bit scale (low nibble) and 4-bit min (high
// nibble); byte l of quarter h holds elements 128h + l, +32, +64, +96 in bit pairs 0..7.
struct UnpackQ2_K {
  using Block = BlockQ2_K;
  static void unpack(const Block& b, KUnpacked* u) {
    const __m256i m3 = _mm256_set1_epi8(3);
    EMBER_UNROLL
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(b.qs + 32 * h);
      u->q[4 * h] = _mm256_and_si256(q, m3);
      u->q[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
      u->q[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
      u->q[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
    }
    const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F)));
    u->m16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
    // Vector v covers sub-blocks 2v (low lane) and 2v + 1 (high lane), as in Q6_K.
    const __m256i lo = _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i hi = _mm256_permute2x128_si256(sc16, sc16, 0x11);
    EMBER_UNROLL
    for (int k = 0; k < 8; ++k) {
      const int e = 2 * (k % 4);
      const __m256i pick =
          _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * (e + 1))),
                           _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * e)));
      u->sc[k] = _mm256_shuffle_epi8(k < 4 ? lo : hi, pick);
    }
    u->d = _mm256_set1_ps(h2f(b.d));
    u->dmin = _mm256_set1_ps(h2f(b.dmin));
  }
};

template <class Isa, class U, int NR, int NT>
void tile_k(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y,
            size_t ys) {
  using B = typename U::Block;
  __m256 acc[NR][NT];
  zero_tile(acc);
  KUnpacked u[NR];
  for (int64_t i = 0; i < n / kQKK; ++i) {
    for (size_t off = 0; off < sizeof(B); off += 64) prefetch_ahead<NR>(w, ws, i * sizeof(B) + off);
    EMBER_UNROLL
    for (int r = 0; r < NR; ++r) U::unpack(reinterpret_cast<const B*>(w + r * ws)[i], &u[r]);
    EMBER_UNROLL
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& yb = reinterpret_cast<const BlockQ8_K*>(a + t * as)[i];
      __m256i sumi[NR];
      EMBER_UNROLL
      for (int r = 0; r < NR; ++r) sumi[r] = _mm256_setzero_si256();
      EMBER_UNROLL
      for (int k = 0; k < 8; ++k) {
        const __m256i yk = load256(yb.qs + 32 * k);
        EMBER_UNROLL
        for (int r = 0; r < NR; ++r) {
          sumi[r] = Isa::dot_s16(sumi[r], _mm256_maddubs_epi16(u[r].q[k], yk), u[r].sc[k]);
          if constexpr (NR * NT > 1) keep_in_register(sumi[r]);  // (see keep_in_register)
        }
      }
      const __m256i bsums = load256(yb.bsums);
      const __m256 dy = _mm256_set1_ps(yb.d);
      EMBER_UNROLL
      for (int r = 0; r < NR; ++r) {
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_madd_epi16(u[r].m16, bsums));
        const __m256 v =
            _mm256_fmsub_ps(u[r].d, _mm256_cvtepi32_ps(sumi[r]), _mm256_mul_ps(u[r].dmin, mins));
        acc[r][t] = _mm256_fmadd_ps(dy, v, acc[r][t]);
      }
    }
  }
  store_tile<NR, NT>(acc, y, ys);
}

// ---- packing for the K types' prefill paths (gemm_avx2.cc, quant_avx512.cc) ----
// A block of P weight rows is unpacked once per matmul call into a scratch buffer, then dotted
// against every token, so the unpacking (nibbles, high bits, fp16 scales, K-quant scale words)
// is paid once per row instead of once per few tokens (the legacy types: legacy_phase.h). The
// packed kernels compute, per (row, token), exactly what the tiles above compute in the same order,
// so their results are bit-identical to the tiles' (the parity tests against llama.cpp on the real
// model are sensitive to the last bit of an activation).

// K types, per super-block i and row r (kRowBytes each, P rows consecutive): everything
// tile_k's U::unpack produces: 8 x 32 levels, 8 x 16 int16 scales, 16 int16 min factors, then
// d and dmin as floats. One packed kernel then serves every K type.
template <int P>
struct KPack {
  static constexpr int kRows = P;
  static constexpr size_t kScOff = 8 * 32, kMinOff = 16 * 32, kDOff = 17 * 32;
  static constexpr size_t kRowBytes = kDOff + 2 * sizeof(float);
  static constexpr size_t kBlockBytes = P * kRowBytes;
  static size_t bytes(int64_t n) { return static_cast<size_t>(n / kQKK) * kBlockBytes; }
};

template <class U, class L>
void k_pack(int64_t n, const uint8_t* w, size_t ws, int nr, uint8_t* buf) {
  using B = typename U::Block;
  // Rows outer, blocks inner: each weight row is read as one sequential stream (rows
  // interleaved block by block are nr streams, which the prefetcher follows far worse; see
  // IsaAvx2::decode_rows); the scattered writes land in the L1-resident scratch.
  for (int r = 0; r < nr; ++r) {
    const B* row = reinterpret_cast<const B*>(w + r * ws);
    for (int64_t i = 0; i < n / kQKK; ++i) {
      uint8_t* p = buf + i * L::kBlockBytes + r * L::kRowBytes;
      KUnpacked u;
      U::unpack(row[i], &u);
      EMBER_UNROLL
      for (int k = 0; k < 8; ++k) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 32 * k), u.q[k]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + L::kScOff + 32 * k), u.sc[k]);
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + L::kMinOff), u.m16);
      const float dd[2] = {_mm256_cvtss_f32(u.d), _mm256_cvtss_f32(u.dmin)};
      __builtin_memcpy(p + L::kDOff, dd, sizeof(dd));
    }
  }
}

// ---- tile tables: any nr <= MR, nt <= MT through one function pointer ----

using TileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t);

template <class Isa, class U>
struct SuperK {
  template <int R, int T>
  static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y,
                  size_t ys) {
    tile_k<Isa, U, R, T>(n, w, ws, a, as, y, ys);
  }
};
template <class Isa, class L>
struct FloatK {
  template <int R, int T>
  static void run(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y,
                  size_t ys) {
    tile_float<L, R, T>(n, w, ws, a, as, y, ys);
  }
};

// fn[r - 1][t - 1] for r <= MR, t <= MT.
template <class K, int MR, int MT>
struct TileTable {
  TileFn fn[MR][MT] = {};
  constexpr TileTable() { fill<1, 1>(); }
  template <int R, int T>
  constexpr void fill() {
    fn[R - 1][T - 1] = &K::template run<R, T>;
    if constexpr (T < MT) {
      fill<R, T + 1>();
    } else if constexpr (R < MR) {
      fill<R + 1, 1>();
    }
  }
};

template <class K, int MR, int MT>
void run_tile(int64_t n, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,
              float* y, size_t ys) {
  static constexpr TileTable<K, MR, MT> table;
  table.fn[nr - 1][nt - 1](n, w, ws, a, as, y, ys);
}

// Single-token rows one after another through the 1 x 1 tile, in one call (decode with
// decode_rows == 1: an indirect call per row cost ~4% of Gemma's decode on its 262144-row
// output projection). Same code per row as the 1 x 1 tile, so the same results.
template <class K>
void rows_1x1(int64_t n, const uint8_t* w, size_t ws, int64_t nrows, const uint8_t* a, float* y) {
  for (int64_t r = 0; r < nrows; ++r) {
    K::template run<1, 1>(n, w + static_cast<size_t>(r) * ws, ws, a, 0, y + r, 0);
  }
}

// One dot product through the 1 x 1 tile: the vec_dot kernel of this ISA level.
template <class K>
float dot_1x1(int64_t n, const void* w, const void* a) {
  float y;
  K::template run<1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &y,
                        0);
  return y;
}

// Puts this ISA level's tiles (and, with dots, its 1 x 1 tiles as vec_dot) into o: the float
// and K types. The legacy types' kernels are legacy_phase.h's (add_phase_kernels).
template <class Isa>
void register_tiles(KernelOverrides* o, bool dots) {
  static_assert(
      [] {
        for (size_t t = 0; t < kTypeSlots; ++t) {
          const int r = Isa::decode_rows(static_cast<DType>(t));
          if (r < 1 || r > Isa::kMaxRows) return false;
        }
        return true;
      }(),
      "decode_rows must be in 1..kMaxRows (the tile table has no taller tiles)");
  auto add = [&](DType t, auto k) {
    using K = decltype(k);
    const auto i = static_cast<size_t>(t);
    o->gemm[i] = {&run_tile<K, Isa::kMaxRows, Isa::kMaxTokens>, Isa::kMaxRows, Isa::kMaxTokens,
                  Isa::decode_rows(t), &rows_1x1<K>};
    if (dots) o->dot[i] = &dot_1x1<K>;
  };
  add(DType::F32, FloatK<Isa, LoadF32>{});
  add(DType::F16, FloatK<Isa, LoadF16>{});
  add(DType::BF16, FloatK<Isa, LoadBF16>{});
  add(DType::Q2_K, SuperK<Isa, UnpackQ2_K>{});
  add(DType::Q4_K, SuperK<Isa, UnpackQ4_K>{});
  add(DType::Q5_K, SuperK<Isa, UnpackQ5_K>{});
  add(DType::Q6_K, SuperK<Isa, UnpackQ6_K>{});
}

}  // namespace
}  // namespace ember::tensor::simd
