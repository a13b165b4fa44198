// The GEMM tiles of gemm_tiles.h compiled for AVX-512 (F, BW, VL, DQ) with VNNI: int8 and int16
// dot products fuse into vpdpbusd / vpdpwssd, and the 32 vector registers hold 4 x 4 tiles of
// accumulators. Vectors stay 256 bits wide (a legacy block is 32 bytes; a K sub-block is 32
// levels), which also avoids 512-bit frequency effects. The 1 x 1 tiles are this level's
// vec_dot kernels. Chosen at run time by quant.cc when the CPU has these features (Debian's
// Highway emits no VNNI, hence intrinsics).
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

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
#include "tensor/gemm_tiles.h"  // IWYU pragma: keep

namespace ember::tensor::simd {
namespace {

struct IsaAvx512Vnni {
  static constexpr int kMaxRows = 4, kMaxTokens = 4;
  // 8 rows in flight for single-token legacy tiles: ~10% faster on the 262144 x 640 Q8_0 output
  // projection (memory-bound); K types keep 4 (their unpacked blocks would spill).
  static constexpr int kDecodeRowsLegacy = 8;
  static constexpr bool kExactU8 = true;
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
};

// ---- packed legacy tiles for prefill ----
// The 256-bit tiles above unpack every weight block once per 4 tokens, and spend a convert, a
// multiply and an FMA per (row, token, block). Here a block of kPackRows rows is unpacked once
// for all tokens, two 32-element blocks side by side in one 512-bit vector, so the per-(row,
// token) work covers two blocks at a time.
// Packed layout, per pair j of blocks (2j, 2j+1): kPackRows vectors of 64 unsigned levels (row
// r at r * 64), then kPackRows vectors of 16 floats (8 x d of block 2j, 8 x d of block 2j+1).
// A trailing odd block has a zero upper half (levels and scale), so it adds exactly 0.
constexpr int kPackRows = 8;
constexpr size_t kPairBytes = kPackRows * 128;

int64_t pairs_of(int64_t n) {
  return (n / kQK + 1) / 2;
}

size_t legacy_pack_bytes(int64_t n) {
  return static_cast<size_t>(pairs_of(n)) * kPairBytes;
}

template <class U>
void legacy_pack(int64_t n, const uint8_t* w, size_t ws, int nr, uint8_t* buf) {
  using B = typename U::Block;
  const int64_t nb = n / kQK;
  for (int64_t j = 0; j < pairs_of(n); ++j) {
    uint8_t* base = buf + j * kPairBytes;
    const bool two = 2 * j + 1 < nb;
    for (int r = 0; r < nr; ++r) {
      const B* b = reinterpret_cast<const B*>(w + r * ws) + 2 * j;
      const __m256i lo = U::template levels<IsaAvx512Vnni>(b[0]);
      const __m256i hi = two ? U::template levels<IsaAvx512Vnni>(b[1]) : _mm256_setzero_si256();
      _mm512_storeu_si512(base + r * 64, _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1));
      const __m256 dhi = two ? _mm256_set1_ps(h2f(b[1].d)) : _mm256_setzero_ps();
      _mm512_storeu_ps(base + (kPackRows + r) * 64,
                       _mm512_insertf32x8(_mm512_set1_ps(h2f(b[0].d)), dhi, 1));
    }
  }
}

// R packed rows x T tokens, accumulators in registers: 16 zmm for 8 x 2.
template <class U, int R, int T>
void legacy_packed_rt(int64_t n, const uint8_t* buf, const uint8_t* a, size_t as, float* y,
                      size_t ys) {
  const int64_t nb = n / kQK;
  __m512 acc[R][T];
  EMBER_UNROLL
  for (auto& row : acc) {
    EMBER_UNROLL
    for (auto& v : row) v = _mm512_setzero_ps();
  }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(U::kOffset));
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t j = 0; j < pairs_of(n); ++j) {
    const uint8_t* base = buf + j * kPairBytes;
    const bool two = 2 * j + 1 < nb;
    __m512i qy[T], neg[T];
    __m512 dy[T];
    EMBER_UNROLL
    for (int t = 0; t < T; ++t) {
      const BlockQ8_0* yb = reinterpret_cast<const BlockQ8_0*>(a + t * as) + 2 * j;
      const __m256i qhi = two ? load256(yb[1].qs) : _mm256_setzero_si256();
      qy[t] = _mm512_inserti64x4(_mm512_castsi256_si512(load256(yb[0].qs)), qhi, 1);
      const __m256 dhi = two ? _mm256_set1_ps(h2f(yb[1].d)) : _mm256_setzero_ps();
      dy[t] = _mm512_insertf32x8(_mm512_set1_ps(h2f(yb[0].d)), dhi, 1);
      // sum(q * y) = sum(u * y) - kOffset * sum(y), as in tile_legacy_u
      neg[t] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, qy[t]));
    }
    EMBER_UNROLL
    for (int r = 0; r < R; ++r) {
      const __m512i ux = _mm512_loadu_si512(base + r * 64);
      const __m512 dx = _mm512_loadu_ps(base + (kPackRows + r) * 64);
      EMBER_UNROLL
      for (int t = 0; t < T; ++t) {
        const __m512i p = _mm512_dpbusd_epi32(neg[t], ux, qy[t]);
        acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[t]), _mm512_cvtepi32_ps(p), acc[r][t]);
      }
    }
  }
  EMBER_UNROLL
  for (int r = 0; r < R; ++r) {
    EMBER_UNROLL
    for (int t = 0; t < T; ++t) y[t * ys + r] = _mm512_reduce_add_ps(acc[r][t]);
  }
}

template <class U, int R>
void legacy_packed_rows(int64_t n, const uint8_t* buf, const uint8_t* a, size_t as, int64_t nt,
                        float* y, size_t ys) {
  int64_t t = 0;
  for (; t + 2 <= nt; t += 2) legacy_packed_rt<U, R, 2>(n, buf, a + t * as, as, y + t * ys, ys);
  if (t < nt) legacy_packed_rt<U, R, 1>(n, buf, a + t * as, as, y + t * ys, ys);
}

using PackedRowsFn = void (*)(int64_t, const uint8_t*, const uint8_t*, size_t, int64_t, float*,
                              size_t);

template <class U, size_t... R>
constexpr std::array<PackedRowsFn, sizeof...(R)> packed_rows_table(std::index_sequence<R...>) {
  return {&legacy_packed_rows<U, static_cast<int>(R) + 1>...};
}

template <class U>
void legacy_packed(int64_t n, const uint8_t* buf, int nr, const uint8_t* a, size_t as, int64_t nt,
                   float* y, size_t ys) {
  static constexpr auto table = packed_rows_table<U>(std::make_index_sequence<kPackRows>());
  table[nr - 1](n, buf, a, as, nt, y, ys);
}

template <class U>
void add_packed(KernelOverrides* o, DType t) {
  GemmKernel& g = o->gemm[static_cast<size_t>(t)];
  g.pack = &legacy_pack<U>;
  g.packed = &legacy_packed<U>;
  g.pack_bytes = &legacy_pack_bytes;
  g.pack_rows = kPackRows;
  g.pack_min_tokens = 4;  // from 4 tokens on, one unpack already pays for itself
}

}  // namespace

KernelOverrides avx512_kernels() {
  KernelOverrides o;
  if (!cpu_has_avx512_vnni()) return o;
  register_tiles<IsaAvx512Vnni>(&o, true);
  add_packed<UnpackUQ8_0>(&o, DType::Q8_0);
  add_packed<UnpackUQ4_0>(&o, DType::Q4_0);
  add_packed<UnpackUQ5_0>(&o, DType::Q5_0);
  return o;
}

}  // namespace ember::tensor::simd
#pragma GCC diagnostic pop
#pragma GCC pop_options

namespace ember::tensor::simd {
bool cpu_has_avx512_vnni() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}
}  // namespace ember::tensor::simd
