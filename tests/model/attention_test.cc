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
