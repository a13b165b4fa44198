// argmax: the scalar twin, the AVX2 kernel and the dispatch (argmax.h).
#include "tensor/argmax.h"

#include <immintrin.h>

#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {

int32_t ref::argmax(const float* x, int32_t n) {
  if (x[0] != x[0]) return 0;
  float m = x[0];
  for (int32_t i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;  // a NaN never compares greater
  int32_t best = 0;
  while (x[best] != m) ++best;  // the first index holding the maximum
  return best;
}

int32_t argmax(const float* x, int32_t n) {
  return active_argmax()(x, n);
}

namespace simd {
namespace {

// Blocks of 256: each block's maximum in 8 independent chains of `max` (no index kept: the
// loop is loads and maxima only), compared with the running maximum; only a block holding a
// strictly greater value becomes the block to search, so the block of the first occurrence
// of the maximum is kept. Then one scan of that block for its first index, and the tail one
// value at a time. The chains start from the running maximum and take each value as the
// first operand of vmaxps, which returns the second when the first is a NaN: a NaN never
// enters a chain.
__attribute__((target("avx2"))) int32_t argmax_avx2(const float* x, int32_t n) {
  if (x[0] != x[0]) return 0;
  constexpr int32_t kChains = 8, kBlock = 256;
  float m = x[0];
  __m256 run = _mm256_set1_ps(m);
  int32_t block = -1;
  int32_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    __m256 c[kChains];
    for (auto& v : c) v = run;
    for (int32_t j = 0; j < kBlock; j += 8 * kChains) {
      for (int k = 0; k < kChains; ++k)
        c[k] = _mm256_max_ps(_mm256_loadu_ps(x + i + j + 8 * k), c[k]);
    }
    __m256 b = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(c[0], c[1]), _mm256_max_ps(c[2], c[3])),
                             _mm256_max_ps(_mm256_max_ps(c[4], c[5]), _mm256_max_ps(c[6], c[7])));
    if (_mm256_movemask_ps(_mm256_cmp_ps(b, run, _CMP_GT_OQ)) == 0) continue;
    b = _mm256_max_ps(b, _mm256_permute2f128_ps(b, b, 1));
    b = _mm256_max_ps(b, _mm256_shuffle_ps(b, b, 0x4e));
    b = _mm256_max_ps(b, _mm256_shuffle_ps(b, b, 0xb1));
    m = _mm256_cvtss_f32(b);
    run = _mm256_set1_ps(m);
    block = i;
  }
  int32_t where = 0;
  if (block >= 0) {
    where = block;
    while (x[where] != m) ++where;
  }
  for (; i < n; ++i) {
    if (x[i] > m) {
      m = x[i];
      where = i;
    }
  }
  return where;
}

}  // namespace

void add_avx2_argmax(KernelOverrides* o) {
  o->argmax = &argmax_avx2;
}

}  // namespace simd
}  // namespace ember::tensor
