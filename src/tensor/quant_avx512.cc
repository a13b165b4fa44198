// The GEMM tiles of gemm_tiles.h compiled for AVX-512 (F, BW, VL, DQ) with VNNI: int8 and int16
// dot products fuse into vpdpbusd / vpdpwssd, and the 32 vector registers hold 4 x 4 tiles of
// accumulators. Vectors stay 256 bits wide (a legacy block is 32 bytes; a K sub-block is 32
// levels), which also avoids 512-bit frequency effects. The 1 x 1 tiles are this level's
// vec_dot kernels. The legacy types (Q8_0, Q4_0, Q5_0, Q4_1, Q5_1) are replaced by
// legacy_avx512.cc, which reduces each block to one integer before any float work. Chosen at run
// time by quant.cc when the CPU has these features (Debian's Highway emits no VNNI, hence
// intrinsics).
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
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
  // Rows per single-token (decode) tile; see IsaAvx2::decode_rows for why one sequential
  // stream beats interleaved rows. Measured here (kernels_bench, AMD EPYC Zen 4 VM, 2 MiB pages,
  // medians of three rounds, GB/s at 1 / 2 threads): Q6_K 65536x1024 1 row 18.2 / 29.0, 4 rows
  // 4.4 / 7.9; Q4_K 65536x1024 1 row 14.3 / 24.8, 4 rows 10.9 / 19.2. The legacy types' entries
  // are replaced by legacy_avx512.cc (one row at a time, in its own float order).
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

}  // namespace

KernelOverrides avx512_kernels() {
  KernelOverrides o;
  if (!cpu_has_avx512_vnni()) return o;
  register_tiles<IsaAvx512Vnni>(&o, true);
  add_avx512_legacy(&o);  // Q8_0, Q4_0, Q5_0, Q4_1, Q5_1: their own order (legacy_avx512.cc)
  add_k_packed<UnpackQ4_K>(&o, DType::Q4_K);
  add_k_packed<UnpackQ5_K>(&o, DType::Q5_K);
  add_k_packed<UnpackQ6_K>(&o, DType::Q6_K);
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
