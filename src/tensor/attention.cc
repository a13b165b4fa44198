// The scalar attention reference (attention.h) and the dispatch to the active level's kernel
// (attention_avx2.cc at the avx2 and avx512-vnni levels).
#include "tensor/attention.h"

#include <algorithm>
#include <cmath>

#include "tensor/quant_simd.h"

namespace ember::tensor {

namespace ref {

// Eight partial sums let the compiler vectorize the dot product without reassociating.
void attend_one(const float* __restrict q, const float* __restrict k, const float* __restrict v,
                int64_t stride, int32_t n, int32_t hd, float scale, float* __restrict scores,
                float* __restrict out) {
  float mx = -INFINITY;
  for (int32_t p = 0; p < n; ++p) {
    const float* kp = k + p * stride;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t d = 0;
    for (; d + 8 <= hd; d += 8) {
      for (int j = 0; j < 8; ++j) acc[j] += q[d + j] * kp[d + j];
    }
    float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; d < hd; ++d) s += q[d] * kp[d];
    scores[p] = s * scale;
    mx = std::max(mx, scores[p]);
  }
  float sum = 0;
  for (int32_t p = 0; p < n; ++p) {
    scores[p] = std::exp(scores[p] - mx);
    sum += scores[p];
  }
  std::fill(out, out + hd, 0.f);
  const float inv = 1.f / sum;
  for (int32_t p = 0; p < n; ++p) {
    const float w = scores[p] * inv;
    const float* vp = v + p * stride;
    int32_t d = 0;
    for (; d + 8 <= hd; d += 8) {  // fixed-width body: vectorized even at -O2's cost model
      for (int j = 0; j < 8; ++j) out[d + j] += w * vp[d + j];
    }
    for (; d < hd; ++d) out[d] += w * vp[d];
  }
}

void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride) {
  for (int32_t g = 0; g < nq; ++g) {
    attend_one(q + g * q_stride, k, v, kv_stride, n, hd, scale, scores, out + g * out_stride);
  }
}

}  // namespace ref

void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride) {
  active_attend_group()(q, q_stride, nq, k, v, kv_stride, n, hd, scale, scores, out, out_stride);
}

}  // namespace ember::tensor
