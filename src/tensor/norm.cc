// rms_norm: the scalar twin, the AVX2 version (two vectors of four double lanes) and the
// dispatch. The lane order is norm.h's; both versions share the reduction and the scaling pass.
#include "tensor/norm.h"

#include <immintrin.h>

#include <cmath>

#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {
namespace {

constexpr int kLanes = 8;

float rms_scale(const double (&lane)[kLanes], int64_t n, float eps) {
  const double sum =
      ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
  return static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
}

// Elements [from, n) into their lanes, in index order (from a multiple of kLanes).
void add_squares(const float* x, int64_t from, int64_t n, double (&lane)[kLanes]) {
  for (int64_t i = from; i < n; ++i) {
    lane[i % kLanes] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  }
}

}  // namespace

void ref::rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double lane[kLanes] = {};
  add_squares(x, 0, n, lane);
  const float s = rms_scale(lane, n, eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s * w[i];
}

void rms_norm(const float* x, const float* w, float* out, int64_t n, float eps) {
  active_rms_norm()(x, w, out, n, eps);
}

namespace simd {
namespace {

// Lanes 0-3 in lo, 4-7 in hi; a square is exact in double, so the FMA rounds as the scalar
// twin's add does.
__attribute__((target("avx2,fma"))) void rms_norm_avx2(const float* x, const float* w, float* out,
                                                       int64_t n, float eps) {
  __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
    const __m256d b = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
    lo = _mm256_fmadd_pd(a, a, lo);
    hi = _mm256_fmadd_pd(b, b, hi);
  }
  double lane[kLanes];
  _mm256_storeu_pd(lane, lo);
  _mm256_storeu_pd(lane + 4, hi);
  add_squares(x, i, n, lane);
  const float s = rms_scale(lane, n, eps);
  const __m256 vs = _mm256_set1_ps(s);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * s * w[i];
}

}  // namespace

void add_avx2_norm(KernelOverrides* o) {
  o->rms_norm = &rms_norm_avx2;
}

}  // namespace simd
}  // namespace ember::tensor
