// The GEMM tiles of gemm_tiles.h compiled for AVX-512 (F, BW, VL, DQ) with VNNI: int8 and int16
// dot products fuse into vpdpbusd / vpdpwssd, and the 32 vector registers hold 4 x 4 tiles of
// accumulators. Vectors stay 256 bits wide (a legacy block is 32 bytes; a K sub-block is 32
// levels), which also avoids 512-bit frequency effects. The 1 x 1 tiles are this level's
// vec_dot kernels. Chosen at run time by quant.cc when the CPU has these features (Debian's
// Highway emits no VNNI, hence intrinsics).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

// After every include that defines non-local functions: only this file's own (internal-linkage)
// code is compiled for AVX-512, so no inline function shared with other TUs gets AVX-512 code.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
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

}  // namespace

KernelOverrides avx512_kernels() {
  KernelOverrides o;
  if (!cpu_has_avx512_vnni()) return o;
  register_tiles<IsaAvx512Vnni>(&o, true);
  return o;
}

}  // namespace ember::tensor::simd
#pragma GCC pop_options

namespace ember::tensor::simd {
bool cpu_has_avx512_vnni() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
}
}  // namespace ember::tensor::simd
