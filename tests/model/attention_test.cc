// The grouped attention kernel and the vectorized GELU against their per-element references.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/attention.h"
#include "model/ops.h"

namespace ember::model {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Queries of a group, keys/values strided as in a multi-head cache (head 1 of 2).
void expect_group_equals_per_query(int32_t nq, int32_t n, int32_t hd) {
  const int64_t kv_stride = 2 * hd, q_stride = hd + 8, out_stride = hd + 4;
  const auto q = random_floats(static_cast<size_t>(nq * q_stride), 1 + nq, 1.f);
  const auto kv = random_floats(static_cast<size_t>(n * kv_stride), 2 + n, 1.f);
  const auto vv = random_floats(static_cast<size_t>(n * kv_stride), 3 + n, 1.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scores(static_cast<size_t>(nq * n));
  std::vector<float> got(static_cast<size_t>(nq * out_stride), NAN);
  ops::attend_group(q.data(), q_stride, nq, kv.data() + hd, vv.data() + hd, kv_stride, n, hd, scale,
                    scores.data(), got.data(), out_stride);
  std::vector<float> want(static_cast<size_t>(hd));
  for (int32_t g = 0; g < nq; ++g) {
    ops::attend_one(q.data() + g * q_stride, kv.data() + hd, vv.data() + hd, kv_stride, n, hd,
                    scale, scores.data(), want.data());
    for (int32_t d = 0; d < hd; ++d) {
      ASSERT_NEAR(got[g * out_stride + d], want[d], 1e-5f)
          << "nq=" << nq << " n=" << n << " hd=" << hd << " g=" << g << " d=" << d;
    }
  }
}

TEST(Attention, grouped_queries_equal_the_per_query_reference) {
  for (int32_t nq : {1, 2, 3, 4, 5, 8}) {
    for (int32_t n : {1, 2, 3, 17, 224}) {
      expect_group_equals_per_query(nq, n, 256);
      expect_group_equals_per_query(nq, n, 64);
    }
  }
}

TEST(Attention, head_sizes_without_a_vector_path_fall_back_to_the_reference) {
  expect_group_equals_per_query(4, 9, 24);
  expect_group_equals_per_query(2, 5, 7);
}

// KV held in blocks: the same positions cut into segments anywhere give the same bits as one
// contiguous run (the cache reuses blocks, so this is what makes a hit bit-identical).
void expect_segments_equal_contiguous(int32_t nq, int32_t n, int32_t hd,
                                      const std::vector<int32_t>& cuts) {
  const int64_t kv_stride = 2 * hd;
  const auto q = random_floats(static_cast<size_t>(nq * hd), 11 + nq, 1.f);
  const auto kv = random_floats(static_cast<size_t>(n * kv_stride), 12 + n, 1.f);
  const auto vv = random_floats(static_cast<size_t>(n * kv_stride), 13 + n, 1.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scores(static_cast<size_t>(nq * n));
  std::vector<float> want(static_cast<size_t>(nq * hd)), got(want.size(), NAN);
  ops::attend_group(q.data(), hd, nq, kv.data(), vv.data(), kv_stride, n, hd, scale, scores.data(),
                    want.data(), hd);
  // Segments live in separate buffers, as blocks do.
  std::vector<std::vector<float>> ks, vs;
  std::vector<ops::KvSegment> segs;
  int32_t at = 0;
  std::vector<int32_t> ends = cuts;
  ends.push_back(n);
  for (int32_t end : ends) {
    if (end <= at) continue;
    ks.emplace_back(kv.begin() + at * kv_stride, kv.begin() + end * kv_stride);
    vs.emplace_back(vv.begin() + at * kv_stride, vv.begin() + end * kv_stride);
    at = end;
  }
  at = 0;
  for (size_t i = 0; i < ks.size(); ++i) {
    const int32_t m = static_cast<int32_t>(ks[i].size() / size_t(kv_stride));
    segs.push_back({ks[i].data(), vs[i].data(), m});
    at += m;
  }
  ops::attend_group_segments(q.data(), hd, nq, segs.data(), static_cast<int32_t>(segs.size()),
                             kv_stride, n, hd, scale, scores.data(), got.data(), hd);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "nq=" << nq << " n=" << n << " hd=" << hd << " i=" << i;
  }
  std::vector<float> one(static_cast<size_t>(hd)), one_seg(one.size());
  ops::attend_one(q.data(), kv.data(), vv.data(), kv_stride, n, hd, scale, scores.data(),
                  one.data());
  ops::attend_one_segments(q.data(), segs.data(), static_cast<int32_t>(segs.size()), kv_stride, n,
                           hd, scale, scores.data(), one_seg.data());
  EXPECT_EQ(one, one_seg);
}

TEST(Attention, segmented_kv_is_bit_identical_to_contiguous) {
  for (int32_t hd : {64, 256, 24}) {
    for (int32_t nq : {1, 3, 4, 8}) {
      expect_segments_equal_contiguous(nq, 1, hd, {});
      expect_segments_equal_contiguous(nq, 37, hd, {16, 32});
      expect_segments_equal_contiguous(nq, 37, hd, {1, 2, 3, 17, 18});
      expect_segments_equal_contiguous(nq, 100, hd, {5, 21, 37, 53, 69, 85});
    }
  }
}

TEST(Gelu, vectorized_gelu_mul_equals_the_table_per_element) {
  // Covers the table range, both cut-offs exactly, and the pass-through / zero regions.
  std::vector<float> gate = random_floats(1003, 7, 14.f);
  gate[0] = -10.f;
  gate[1] = 10.f;
  gate[2] = 0.f;
  gate[3] = -9.999f;
  const std::vector<float> up = random_floats(gate.size(), 8, 2.f);
  std::vector<float> got = gate;
  ops::gelu_mul(got.data(), up.data(), static_cast<int64_t>(got.size()));
  const ops::GeluTable& gelu = ops::gelu_table();
  for (size_t i = 0; i < gate.size(); ++i) {
    ASSERT_EQ(got[i], gelu(gate[i]) * up[i]) << "i=" << i << " x=" << gate[i];
  }
}

}  // namespace
}  // namespace ember::model
