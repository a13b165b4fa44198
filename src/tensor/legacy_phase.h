// The legacy types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) in a block-first float order: the row
// (decode) side, shared by the levels that use this order (quant_avx512.cc for avx512-vnni,
// gemm_avx2.cc for avx2), each with its own packed prefill path computing the same thing.
//
// Order (every path of a level that uses it: decode rows, tiles, prefill, vec_dot): for weight
// row w and activation row a, each block b's integer sum s_b = sum(q_w * q_a) is exact; the
// block's term goes into accumulator j = b mod 8:
//   acc[j] = fma(d_w * d_a, float(s_b), acc[j]);   with a min (Q4_1, Q5_1) then
//   acc[j] = fma(m_w, s_a, acc[j]);                 (s_a = d_a * sum(q_a), the Q8_1 field)
// and the result is ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)).
//
// The plain tiles (gemm_tiles.h) scale every int32 lane of every block (8 lanes per (row,
// token, block)); here a block is reduced to its one integer first, so the float work per
// (row, token, block) is one lane. On one row (decode), 8 blocks' integer sums are reduced into
// one vector (lane j = block j of the group), then scaled and accumulated with one multiply
// and one FMA for 8 blocks; the prefill paths keep rows in vector lanes instead.
//
// Included by the SIMD translation units after their `#pragma GCC target`, as gemm_tiles.h is
// (internal linkage, one copy per level). Isa supplies dot_u8s8 (4 u8 x s8 products into each
// int32 lane, exact for the levels here: unsigned levels below 32, or VNNI), bits_to_16, and
// the fp16 conversions of 8 blocks' first 32-bit words: d_of (d in the low 16 bits) and d_m_of
// (d and m), exact, so any instruction sequence gives the same floats.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/gemm_tiles.h"
#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

namespace ember::tensor::simd {
namespace {  // NOLINT: deliberately one private copy per including TU (different targets)

constexpr int kPhases = 8;

template <class U, class Isa>
struct Phase {
  using B = typename U::Block;
  static constexpr bool kMin = std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_1>;
  using Y = std::conditional_t<kMin, BlockQ8_1, BlockQ8_0>;
  // Signed Q8_0 levels (UnpackQ8_0, for a dot product without exact u8 x s8 at 255: avx2's
  // maddubs) go through the sign trick: |q| (at most 128) times q_a with q's sign, pair sums at
  // most 2 x 128 x 127 = 32,512.
  static constexpr bool kSigned = std::is_same_v<U, UnpackQ8_0>;
  // Otherwise unsigned levels u = q + kOffset (kOffset = 0 for the types with a min).
  static constexpr int kOffset = [] {
    if constexpr (kMin || kSigned) {
      return 0;
    } else {
      return U::kOffset;
    }
  }();
  static __m256i levels(const B& b) {
    if constexpr (kSigned) {
      return U::levels(b);
    } else {
      return U::template levels<Isa>(b);
    }
  }
  // The block's exact integer sum(q * q_a) + kOffset * sum(q_a), in 8 int32 lanes.
  static __m256i dot(const B& b, const uint8_t* qa) {
    const __m256i y = load256(qa), q = levels(b);
    if constexpr (kSigned) {
      return Isa::dot_u8s8(_mm256_setzero_si256(), _mm256_sign_epi8(q, q), _mm256_sign_epi8(y, q));
    } else {
      return Isa::dot_u8s8(_mm256_setzero_si256(), q, y);
    }
  }
};

// The 8 int32 lanes of each p[k] summed: lane k of the result (exact, any order).
inline __m256i reduce8(const __m256i p[8]) {
  const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
  const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
  const __m256i q0 = _mm256_hadd_epi32(h01, h23), q1 = _mm256_hadd_epi32(h45, h67);
  // q0 lanes 0..3: blocks 0..3, first half of each; lanes 4..7: their second halves.
  return _mm256_add_epi32(_mm256_permute2x128_si256(q0, q1, 0x20),
                          _mm256_permute2x128_si256(q0, q1, 0x31));
}

// ---- tokens in blocks ----
// fn(std::integral_constant<int, N>{}, t) for tokens [t, t + N): blocks of B from t = 0, then
// one block of the 1..B-1 left over, so each level's multi-token kernel is instantiated per
// block size with its accumulators in registers.
template <int N, class Fn>
void token_rest(size_t left, size_t t, Fn& fn) {
  if constexpr (N > 0) {
    if (left == N) {
      fn(std::integral_constant<int, N>{}, t);
    } else {
      token_rest<N - 1>(left, t, fn);
    }
  }
}

template <int B, class Fn>
void for_token_blocks(size_t nt, Fn&& fn) {
  size_t t = 0;
  for (; t + B <= nt; t += B) fn(std::integral_constant<int, B>{}, t);
  token_rest<B - 1>(nt - t, t, fn);
}

// ---- the activation side, once per token per call ----
// d_a per block (float), the offset correction -kOffset * sum(q_a) (int32), s_a (float, types
// with a min); zero-padded to whole groups of 8 blocks so the last group's extra lanes add 0.
struct ActSide {
  std::vector<float> d, s;
  std::vector<int32_t> corr;
};

template <class U, class Isa>
void act_side(int64_t nb, const uint8_t* a, ActSide* side) {
  using P = Phase<U, Isa>;
  const size_t padded = static_cast<size_t>((nb + kPhases - 1) / kPhases * kPhases);
  if (side->d.size() < padded) {
    side->d.resize(padded);
    side->s.resize(padded);
    side->corr.resize(padded);
  }
  const auto* y = reinterpret_cast<const typename P::Y*>(a);
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    side->d[b] = h2f(y[b].d);
    if constexpr (P::kMin) {
      side->s[b] = h2f(y[b].s);
      side->corr[b] = 0;
    } else if constexpr (P::kOffset == 0) {
      side->s[b] = 0.f;
      side->corr[b] = 0;
    } else {
      const __m256i sum = Isa::dot_u8s8(_mm256_setzero_si256(), ones, load256(y[b].qs));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      side->corr[b] = -P::kOffset * _mm_cvtsi128_si32(s4);
      side->s[b] = 0.f;
    }
  }
  for (size_t b = static_cast<size_t>(nb); b < padded; ++b) {
    side->d[b] = side->s[b] = 0.f;
    side->corr[b] = 0;
  }
}

// ---- one row against one token (decode, few-token tiles, vec_dot) ----
// Rows are read one after another as one sequential stream (see IsaAvx2::decode_rows); the
// software prefetch runs kPrefetchBytes ahead (rows are contiguous).
// 8 KiB: on the Zen 5 host 8-stream decode ran 13-14% faster than at 4 KiB (both models,
// avx512) and batch 1 0-6%; on the Intel host the avx2 one-token kernels timed the same at 4, 8 and
// 16 KiB (kernels_bench; docs/perf-notes.md, "Decode from memory").
constexpr size_t kPrefetchBytes = 8192;

// The first 32 bits (d, or d and m) of 8 consecutive blocks, one vector: scalar loads and
// inserts (a vpgatherdd here held the loop up for a fifth of its samples on Zen 4).
// Blocks at m and after (a row's last, partial group) read as 0.
template <class B>
inline __m256i head_words(const B* x, int m) {
  const auto w = [&](int k) {
    int32_t v = 0;
    if (k < m) __builtin_memcpy(&v, &x[k], sizeof v);
    return v;
  };
  const __m128i lo = _mm_setr_epi32(w(0), w(1), w(2), w(3));
  const __m128i hi = _mm_setr_epi32(w(4), w(5), w(6), w(7));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

template <class U, class Isa>
[[gnu::always_inline]] inline float row_dot(int64_t nb, const uint8_t* w, size_t ws,
                                            const uint8_t* a, const ActSide& side) {
  using P = Phase<U, Isa>;
  using B = typename P::B;
  const B* x = reinterpret_cast<const B*>(w);
  const auto* y = reinterpret_cast<const typename P::Y*>(a);
  const float* side_d = side.d.data();
  const float* side_s = side.s.data();
  const int32_t* side_corr = side.corr.data();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t g = 0; g < nb; g += kPhases) {
    const int m = static_cast<int>(std::min<int64_t>(kPhases, nb - g));
    if (ws != 0) {
      const uint8_t* pf = w + kPrefetchBytes + g * sizeof(B);
      for (size_t off = 0; off < kPhases * sizeof(B); off += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(pf + off), _MM_HINT_T0);
      }
    }
    __m256i p[kPhases];
    __m256i dm;
    if (m == kPhases) {
      EMBER_UNROLL
      for (int k = 0; k < kPhases; ++k) {
        p[k] = P::dot(x[g + k], reinterpret_cast<const uint8_t*>(y[g + k].qs));
      }
      dm = head_words(x + g, kPhases);
    } else {
      EMBER_UNROLL
      for (int k = 0; k < kPhases; ++k) {
        p[k] = k < m ? P::dot(x[g + k], reinterpret_cast<const uint8_t*>(y[g + k].qs))
                     : _mm256_setzero_si256();
      }
      dm = head_words(x + g, m);
    }
    const __m256i s = _mm256_add_epi32(
        reduce8(p), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(side_corr + g)));
    __m256 dw, mw;
    if constexpr (P::kMin) {
      Isa::d_m_of(dm, &dw, &mw);
    } else {
      dw = Isa::d_of(dm);
      mw = _mm256_setzero_ps();
    }
    const __m256 sc = _mm256_mul_ps(dw, _mm256_loadu_ps(side_d + g));
    acc = _mm256_fmadd_ps(sc, _mm256_cvtepi32_ps(s), acc);
    if constexpr (P::kMin) acc = _mm256_fmadd_ps(mw, _mm256_loadu_ps(side_s + g), acc);
  }
  return tile_hsum(acc);
}

// The activation side of nt tokens (a + t * as), once per call (a matmul task), in the thread's
// scratch (one per Scratch: the same template's other instantiations do not touch it).
struct TaskScratch;
template <class U, class Isa, class Scratch = TaskScratch>
const ActSide* act_sides(int64_t nb, const uint8_t* a, size_t as, size_t nt) {
  thread_local std::vector<ActSide> sides;
  if (sides.size() < nt) sides.resize(nt);
  for (size_t t = 0; t < nt; ++t) act_side<U, Isa>(nb, a + t * as, &sides[t]);
  return sides.data();
}

// The same for a whole matmul (GemmKernel::interleaved_prepare): computed by the caller before
// the tasks start and read by all of them, in scratch of its own (the tasks' is rewritten by
// any task that runs on the caller's thread).
struct MatmulScratch;
template <class U, class Isa>
const void* prepare_sides(int64_t n, const uint8_t* a, size_t as, int64_t nt) {
  return act_sides<U, Isa, MatmulScratch>(n / kQK, a, as, static_cast<size_t>(nt));
}

template <class U, class Isa>
ActSide& side_for(int64_t nb, const uint8_t* a) {
  thread_local ActSide side;
  act_side<U, Isa>(nb, a, &side);
  return side;
}

template <class U, class Isa>
float phase_dot(int64_t n, const void* w, const void* a) {
  const int64_t nb = n / kQK;
  return row_dot<U, Isa>(nb, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a),
                         side_for<U, Isa>(nb, static_cast<const uint8_t*>(a)));
}

template <class U, class Isa>
void phase_rows(int64_t n, const uint8_t* w, size_t ws, int64_t nrows, const uint8_t* a, float* y) {
  const int64_t nb = n / kQK;
  const ActSide& side = side_for<U, Isa>(nb, a);
  for (int64_t r = 0; r < nrows; ++r) {
    y[r] = row_dot<U, Isa>(nb, w + static_cast<size_t>(r) * ws, ws, a, side);
  }
}

// The tile entry (any nr x nt; matmul itself sends one token to phase_rows and two or more to
// the packed path): every (row, token) through row_dot.
template <class U, class Isa>
void phase_tile(int64_t n, const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,
                float* y, size_t ys) {
  const int64_t nb = n / kQK;
  for (int t = 0; t < nt; ++t) {
    const uint8_t* at = a + static_cast<size_t>(t) * as;
    const ActSide& side = side_for<U, Isa>(nb, at);
    for (int r = 0; r < nr; ++r) {
      y[static_cast<size_t>(t) * ys + r] =
          row_dot<U, Isa>(nb, w + static_cast<size_t>(r) * ws, ws, at, side);
    }
  }
}

// Registers a type's kernels of this order at a level: the row side above as decode, tile and
// vec_dot, and the level's own packed path from 2 tokens on (one pack, a transpose, costs less
// than a second row_dot pass: ember bench -c 2,3 at avx512-vnni, 2 threads, SmolLM2 226 -> 293
// and 255 -> 360 tok/s, Gemma 125 -> 174 and 124 -> 212 against packing from 4 tokens).
template <class U, class Isa>
void add_phase_kernels(KernelOverrides* o, DType t, PackedRunFn packed_run, int pack_rows) {
  GemmKernel& g = o->gemm[static_cast<size_t>(t)];
  g = GemmKernel{};
  g.tile = &phase_tile<U, Isa>;
  g.max_rows = 4;
  g.max_tokens = 4;
  g.decode_rows = 1;
  g.rows = &phase_rows<U, Isa>;
  g.packed_run = packed_run;
  g.pack_rows = pack_rows;
  g.pack_min_tokens = 2;
  o->dot[static_cast<size_t>(t)] = &phase_dot<U, Isa>;
}

// The next rows of a pack, [next, next + bytes), a slice per block of the nb being packed, into
// L2: packing reads its rows block by block (for the transpose), which is as many interleaved
// streams as rows, and those the hardware prefetcher follows badly (see IsaAvx2::decode_rows).
// Into L2 (T1) measured 1.5x faster than into L1 (T0) at 8 tokens (kernels_bench Q8_0
// 262144x640 at avx512-vnni: 22 against 34 ms), two row blocks ahead no better than one.
inline void prefetch_slice(const uint8_t* next, size_t bytes, int64_t nb, int64_t b) {
  const size_t slice = (bytes / static_cast<size_t>(nb) + 63) / 64 * 64;
  for (size_t o = 0; o < slice; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(next + static_cast<size_t>(b) * slice + o),
                 _MM_HINT_T1);
  }
}

// A group of L rows in the interleaved layout (tensor/interleave.h) as the levels' kernels read
// it: tile b (block column b of the L rows) is the rows' fp16 scales (and mins), their fifth-bit
// words (kQhOff bytes in), then their quant words side by side (kWords bytes in).
template <class U, int L>
struct InterleavedGroup {
  using B = typename U::Block;
  static constexpr bool kQh = std::is_same_v<B, BlockQ5_0> || std::is_same_v<B, BlockQ5_1>;
  static constexpr size_t kHeads =
      std::is_same_v<B, BlockQ4_1> || std::is_same_v<B, BlockQ5_1> ? 2 : 1;
  static constexpr size_t kQhOff = kHeads * L * 2;  // the reordered fifth-bit words
  static constexpr size_t kTile = L * sizeof(B), kWords = kQhOff + (kQh ? L * 4 : 0);
  const uint8_t* group;
  const uint8_t* tile(int64_t b) const { return group + static_cast<size_t>(b) * kTile; }
  // The matrix is one sequential stream (groups follow each other): a fixed distance ahead.
  void prefetch(int64_t b) const {
    const uint8_t* pf = tile(b) + kPrefetchBytes;
    for (size_t off = 0; off < kTile; off += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + off), _MM_HINT_T0);
    }
  }
};

// The same tile of the next interleaved group (group_bytes on: groups are contiguous) into L2,
// while a group is unpacked for several tokens, as the run-time packs prefetch their next rows
// (prefetch_slice). kernels_bench at avx2 on Zen 4, 1 thread, 8 tokens, 3 paired rounds, with
// and without: Q8_0 262144x640 37.9 vs 46.6 ms, Q5_0 131072x640 10.1 vs 13.7, Q4_1 131072x576
// 8.9 vs 11.4.
inline void prefetch_next_group(const uint8_t* tile, size_t group_bytes, size_t tile_bytes) {
  for (size_t o = 0; o < tile_bytes; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(tile + group_bytes + o), _MM_HINT_T1);
  }
}

}  // namespace
}  // namespace ember::tensor::simd
