// The GEMM tiles of gemm_tiles.h compiled for AVX2 + FMA + F16C (16 ymm registers, so tiles of
// at most 4 weight rows x 2 tokens keep their accumulators in registers). Chosen at run time by
// quant.cc when the CPU has AVX2; they are also its vec_dot (the 1 x 1 tile).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

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
  static constexpr int kDecodeRowsLegacy = 4;  // 16 registers
  static constexpr bool kExactU8 = false;      // maddubs saturates int16 pair sums
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

}  // namespace

// vec_dot is the 1 x 1 tile: every output, whatever the tile it comes from, accumulates in the
// same order, so a token's results do not depend on the batch (decode vs prefill, prefix-cache
// hit or miss) and equal vec_dot of the row with its quantized activation.
void add_avx2_gemm(KernelOverrides* o) {
  register_tiles<IsaAvx2>(o, true);
}

}  // namespace ember::tensor::simd
#pragma GCC pop_options
