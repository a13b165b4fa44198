// Attention kernels for the CPU forward pass: softmax(q.K * scale).V of a few queries over n
// cached positions. attend_one is the per-query reference; attend_group runs the queries that
// share one key/value head and one causal range (the heads of a GQA group at one position)
// together, so each key and value row is read once for all of them, with AVX2 + FMA where the
// CPU has it. Both take K and V rows `kv_stride` floats apart.
// The *_segments forms read the positions from several runs of rows (KV held in blocks): the
// positions are the segments' rows in order, and the result is bit-identical to the
// contiguous form over the same rows, whatever the segmentation.
#pragma once

#include <cstdint>

namespace ember::model::ops {

// n consecutive positions whose K and V rows start at k and v (rows kv_stride floats apart).
struct KvSegment {
  const float* k;
  const float* v;
  int32_t n;
};

// One query: out[hd] = softmax(q . K[0..n) * scale) . V[0..n). scores: n floats of scratch.
void attend_one(const float* q, const float* k, const float* v, int64_t kv_stride, int32_t n,
                int32_t hd, float scale, float* scores, float* out);

// nq queries (rows q_stride floats apart) over the same n positions; out rows out_stride floats
// apart. scores: nq * n floats of scratch. Equals attend_one per query up to float rounding.
void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride);

// The same over the positions of segs[0..n_segs); n = total positions (> 0).
void attend_one_segments(const float* q, const KvSegment* segs, int32_t n_segs, int64_t kv_stride,
                         int32_t n, int32_t hd, float scale, float* scores, float* out);
void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegment* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride);

}  // namespace ember::model::ops
