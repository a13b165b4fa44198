// The scalar attention reference (attention.h) and the dispatch to the active level's kernel
// (attention_avx2.cc at the avx2 and avx512-vnni levels). The level table holds the segmented
// form; the contiguous form is one segment.
#include "tensor/attention.h"

#include <algorithm>
#include <cmath>

#include "base/result.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {

namespace ref {

float softcap_scores(float* scores, int32_t n, float cap) {
  float mx = -INFINITY;
  for (int32_t p = 0; p < n; ++p) {
    scores[p] = cap * std::tanh(scores[p] / cap);
    mx = std::max(mx, scores[p]);
  }
  return mx;
}

inline float widen(float x) {
  return x;
}
inline float widen(uint16_t h) {
  return fp16_to_f32(h);
}

// Each element is widened to f32 where it is read (exact for half), so the f16 form computes
// what the f32 form computes over the widened values. Eight partial sums let the compiler
// vectorize the dot product without reassociating. Each score and each output element is
// accumulated in position order, so segmentation never changes a bit.
template <typename T>
void one_segments(const float* __restrict q, const KvSegmentOf<T>* segs, int32_t n_segs,
                  int64_t stride, int32_t n, int32_t hd, float scale, float* __restrict scores,
                  float* __restrict out, float* stats, float softcap) {
  float mx = -INFINITY;
  int32_t p = 0;
  for (int32_t s = 0; s < n_segs; ++s) {
    for (int32_t i = 0; i < segs[s].n; ++i, ++p) {
      const T* kp = segs[s].k + i * stride;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int32_t d = 0;
      for (; d + 8 <= hd; d += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += q[d + j] * widen(kp[d + j]);
      }
      float sc = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; d < hd; ++d) sc += q[d] * widen(kp[d]);
      scores[p] = sc * scale;
      mx = std::max(mx, scores[p]);
    }
  }
  EMBER_ASSERT(p == n);
  if (softcap > 0.f) mx = softcap_scores(scores, n, softcap);
  float sum = 0;
  for (p = 0; p < n; ++p) {
    scores[p] = std::exp(scores[p] - mx);
    sum += scores[p];
  }
  if (stats != nullptr) {
    stats[0] = mx;
    stats[1] = sum;
  }
  std::fill(out, out + hd, 0.f);
  const float inv = 1.f / sum;
  p = 0;
  for (int32_t s = 0; s < n_segs; ++s) {
    for (int32_t i = 0; i < segs[s].n; ++i, ++p) {
      const float w = scores[p] * inv;
      const T* vp = segs[s].v + i * stride;
      int32_t d = 0;
      for (; d + 8 <= hd; d += 8) {  // fixed-width body: vectorized even at -O2's cost model
        for (int j = 0; j < 8; ++j) out[d + j] += w * widen(vp[d + j]);
      }
      for (; d < hd; ++d) out[d] += w * widen(vp[d]);
    }
  }
}

template <typename T>
void group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegmentOf<T>* segs,
                    int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                    float* scores, float* out, int64_t out_stride, float* stats, float softcap) {
  for (int32_t g = 0; g < nq; ++g) {
    one_segments(q + g * q_stride, segs, n_segs, kv_stride, n, hd, scale, scores,
                 out + g * out_stride, stats != nullptr ? stats + 2 * g : nullptr, softcap);
  }
}

void attend_one_segments(const float* q, const KvSegment* segs, int32_t n_segs, int64_t kv_stride,
                         int32_t n, int32_t hd, float scale, float* scores, float* out) {
  one_segments(q, segs, n_segs, kv_stride, n, hd, scale, scores, out, nullptr, 0.f);
}

void attend_one(const float* q, const float* k, const float* v, int64_t kv_stride, int32_t n,
                int32_t hd, float scale, float* scores, float* out) {
  const KvSegment seg{k, v, n};
  attend_one_segments(q, &seg, 1, kv_stride, n, hd, scale, scores, out);
}

void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegment* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats,
                           float softcap) {
  group_segments(q, q_stride, nq, segs, n_segs, kv_stride, n, hd, scale, scores, out, out_stride,
                 stats, softcap);
}
void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegmentF16* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats,
                           float softcap) {
  group_segments(q, q_stride, nq, segs, n_segs, kv_stride, n, hd, scale, scores, out, out_stride,
                 stats, softcap);
}

void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride) {
  const KvSegment seg{k, v, n};
  ref::attend_group_segments(q, q_stride, nq, &seg, 1, kv_stride, n, hd, scale, scores, out,
                             out_stride, nullptr);
}

}  // namespace ref

void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegmentF16* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats,
                           float softcap) {
  active_attend_group_f16()(q, q_stride, nq, segs, n_segs, kv_stride, n, hd, scale, scores, out,
                            out_stride, stats, softcap);
}

void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegment* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats,
                           float softcap) {
  active_attend_group()(q, q_stride, nq, segs, n_segs, kv_stride, n, hd, scale, scores, out,
                        out_stride, stats, softcap);
}

// A part's weight is its sum of exponentials rescaled to the largest score of all parts; each
// part was normalized by its own sum, so it enters with weight / total. One part is copied (its
// coefficient would be exactly 1, but 0 + -0 would turn a negative zero positive).
void merge_attention_parts(const float* parts, int64_t part_stride, const float* stats,
                           int64_t stats_stride, int32_t n_parts, int32_t hd, float* out) {
  EMBER_ASSERT(n_parts > 0);
  if (n_parts == 1) {
    std::copy(parts, parts + hd, out);
    return;
  }
  float mx = -INFINITY;
  for (int32_t j = 0; j < n_parts; ++j) mx = std::max(mx, stats[j * stats_stride]);
  float total = 0;
  for (int32_t j = 0; j < n_parts; ++j) {
    total += stats[j * stats_stride + 1] * std::exp(stats[j * stats_stride] - mx);
  }
  std::fill(out, out + hd, 0.f);
  for (int32_t j = 0; j < n_parts; ++j) {
    const float c = stats[j * stats_stride + 1] * std::exp(stats[j * stats_stride] - mx) / total;
    const float* part = parts + j * part_stride;
    for (int32_t d = 0; d < hd; ++d) out[d] += c * part[d];
  }
}

void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride) {
  const KvSegment seg{k, v, n};
  attend_group_segments(q, q_stride, nq, &seg, 1, kv_stride, n, hd, scale, scores, out, out_stride);
}

}  // namespace ember::tensor
