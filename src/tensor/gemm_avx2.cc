// The GEMM tiles of gemm_tiles.h compiled for AVX2 + FMA + F16C (16 ymm registers, so tiles of
// at most 4 weight rows x 2 tokens keep their accumulators in registers). Chosen at run time by
// quant.cc when the CPU has AVX2; they are also its vec_dot (the 1 x 1 tile).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

// After every include that defines non-local functions: only this file's own (internal-linkage)
// code is compiled for AVX2, so no inline function shared with scalar TUs gets AVX2 code.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "tensor/gemm_tiles.h"  // IWYU pragma: keep

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
  // 17-20 ms for 4. The legacy types are replaced by legacy_avx2.cc (one row at a time, in its
  // own float order).
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
  static constexpr bool kExactU8 = false;  // maddubs saturates int16 pair sums
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
};

// ---- packed paths for prefill ----
// K-type rows packed once per call (gemm_tiles.h: KPack), then R packed rows x T tokens per
// kernel call with the accumulators in registers. Per (row, token, super-block) the same
// integer and float operations as tile_k, in the same order: the results are bit-identical to
// the tiles' (and so to vec_dot), while the unpacking is paid once per row. The legacy types'
// prefill is in legacy_avx2.cc.

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

}  // namespace

// vec_dot is the 1 x 1 tile: every output, whatever the tile it comes from, accumulates in the
// same order, so a token's results do not depend on the batch (decode vs prefill, prefix-cache
// hit or miss) and equal vec_dot of the row with its quantized activation.
void add_avx2_gemm(KernelOverrides* o) {
  register_tiles<IsaAvx2>(o, true);
  add_avx2_legacy(o);  // Q8_0, Q4_0, Q5_0, Q4_1, Q5_1: block-first order (legacy_phase.h)
  add_k_packed<UnpackQ4_K>(o, DType::Q4_K);
  add_k_packed<UnpackQ5_K>(o, DType::Q5_K);
  add_k_packed<UnpackQ6_K>(o, DType::Q6_K);
}

}  // namespace ember::tensor::simd
#pragma GCC pop_options
