// Attention kernels: softmax(q.K * scale).V of a few queries over n cached positions.
// attend_group runs the queries that share one key/value head and one causal range (the heads
// of a GQA group at one position) together, so each key and value row is read once for all of
// them. Keys and values are given as a base pointer and a row stride (`kv_stride` floats
// between positions). The *_segments forms read the positions from several runs of rows (KV
// held in blocks): the positions are the segments' rows in order, and at every level the
// result is bit-identical to the contiguous form over the same rows, whatever the
// segmentation (a prefix-cache hit reuses blocks, so this keeps hits bit-identical).
// Dispatched through the SIMD level table (quant.h's set_simd_level reaches it); ref:: is the
// scalar twin every level is tested against.
//
// The cache may hold K and V as f32 or as IEEE half (KvSegmentF16, the KV cache's default). A
// half element is widened exactly to f32 as it is read and the arithmetic is the f32 form's, so
// at every level the f16 result is bit for bit the f32 result over the same values widened.
#pragma once

#include <cstdint>

namespace ember::tensor {

// n consecutive positions whose K and V rows start at k and v (rows kv_stride elements apart).
template <typename T>
struct KvSegmentOf {
  const T* k;
  const T* v;
  int32_t n;
};
using KvSegment = KvSegmentOf<float>;
using KvSegmentF16 = KvSegmentOf<uint16_t>;  // IEEE half bits

// nq queries (rows q_stride floats apart) over the same n positions; out rows out_stride floats
// apart. scores: nq * n floats of scratch. Equals ref::attend_one per query up to float
// rounding (the vector levels fuse multiply-adds).
void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride);
// The same over the positions of segs[0..n_segs); n = total positions (> 0). With `stats`,
// query g's largest scaled score and its sum of exp(score - largest) go to stats[2g] and
// stats[2g + 1]: what merge_attention_parts needs to combine results over disjoint runs of
// positions. softcap > 0 caps each scaled score s at softcap * tanh(s / softcap) before the
// softmax (gemma2's attention-logit soft-capping; softcap_scores); 0 leaves scores as they are.
void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegment* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats = nullptr,
                           float softcap = 0.f);
void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegmentF16* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats = nullptr,
                           float softcap = 0.f);

// One query's attention over the union of n_parts disjoint runs of positions, from each run's
// result (parts + j * part_stride, hd floats) and its two stats (stats + j * stats_stride: the
// largest score, the sum of exponentials). The weights are combined and the parts summed in
// the order given, in plain scalar code shared by every level, so the same parts give the same
// bits anywhere; one part comes back unchanged. Equals attention over the whole range up to
// float rounding.
void merge_attention_parts(const float* parts, int64_t part_stride, const float* stats,
                           int64_t stats_stride, int32_t n_parts, int32_t hd, float* out);

namespace ref {
// Caps scores[0..n) in place (s -> cap * tanh(s / cap), cap > 0) and returns their new
// largest: the one scalar step every level shares, so capped scores are the same bits anywhere.
float softcap_scores(float* scores, int32_t n, float cap);
// One query: out[hd] = softmax(q . K[0..n) * scale) . V[0..n). scores: n floats of scratch.
void attend_one(const float* q, const float* k, const float* v, int64_t kv_stride, int32_t n,
                int32_t hd, float scale, float* scores, float* out);
void attend_one_segments(const float* q, const KvSegment* segs, int32_t n_segs, int64_t kv_stride,
                         int32_t n, int32_t hd, float scale, float* scores, float* out);
// attend_one per query.
void attend_group(const float* q, int64_t q_stride, int32_t nq, const float* k, const float* v,
                  int64_t kv_stride, int32_t n, int32_t hd, float scale, float* scores, float* out,
                  int64_t out_stride);
void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegment* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats = nullptr,
                           float softcap = 0.f);
void attend_group_segments(const float* q, int64_t q_stride, int32_t nq, const KvSegmentF16* segs,
                           int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd, float scale,
                           float* scores, float* out, int64_t out_stride, float* stats = nullptr,
                           float softcap = 0.f);
}  // namespace ref

}  // namespace ember::tensor
