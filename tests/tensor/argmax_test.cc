// argmax: the scalar twin against its definition, and every level against the twin on the
// cases that decide an index: ties (the lowest index wins, -0 equals +0), NaNs (never picked
// unless first), infinities, the maximum in every lane and chain position, and tails shorter
// than a vector.
#include "tensor/argmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::random_floats;
using testing::RestoreBestLevel;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Every level's index for x, or the first level that disagrees with the twin.
void expect_every_level_agrees(const std::vector<float>& x, int32_t want, const char* what) {
  const auto n = static_cast<int32_t>(x.size());
  ASSERT_EQ(ref::argmax(x.data(), n), want) << "scalar twin, " << what << ", n=" << n;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    ASSERT_EQ(argmax(x.data(), n), want) << level << ", " << what << ", n=" << n;
  }
}

constexpr int32_t kLengths[] = {1, 2, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 1000, 49152 + 5};

TEST(Argmax, the_largest_value_wherever_it_lies) {
  RestoreBestLevel restore;
  for (int32_t n : kLengths) {
    // Every position of a short row; a spread of positions (every lane and chain) of a long one.
    const int32_t stride = n <= 100 ? 1 : n / 97;
    for (int32_t at = 0; at < n; at += stride) {
      auto x = random_floats(n, static_cast<uint32_t>(n * 31 + at), 1.f);
      x[size_t(at)] = 100.f;  // far above any draw of N(0, 1)
      expect_every_level_agrees(x, at, "one maximum");
    }
  }
}

TEST(Argmax, ties_go_to_the_lowest_index_and_minus_zero_equals_zero) {
  RestoreBestLevel restore;
  for (int32_t n : kLengths) {
    if (n < 2) continue;
    for (int32_t first : {0, 1, n / 3, n / 2, n - 2}) {
      // first + 31 and first + 63 sit in a lower lane than first (of the next 32-wide step).
      for (int32_t second :
           {first + 1, first + 8, first + 31, first + 32, first + 33, first + 63, n - 1}) {
        if (second <= first || second >= n) continue;
        auto x = random_floats(n, static_cast<uint32_t>(first * 7 + second), 1.f);
        x[size_t(second)] = 100.f;
        x[size_t(first)] = 100.f;
        expect_every_level_agrees(x, first, "two equal maxima");
        // The later one first in its lane's order must still lose: equal is not greater.
        std::vector<float> neg(size_t(n), -1.f);
        neg[size_t(first)] = -0.f;
        neg[size_t(second)] = 0.f;
        expect_every_level_agrees(neg, first, "-0 then +0");
      }
    }
    // All equal: index 0.
    expect_every_level_agrees(std::vector<float>(size_t(n), 0.25f), 0, "all equal");
  }
}

TEST(Argmax, nans_are_never_picked_unless_first_and_infinities_are_values) {
  RestoreBestLevel restore;
  for (int32_t n : kLengths) {
    // The maximum near the tail and in the middle (inside a block, after NaNs in it).
    for (int32_t at : {n > 2 ? n - 2 : 0, n / 2 + 3}) {
      if (at >= n) continue;
      auto x = random_floats(n, static_cast<uint32_t>(n + 5), 1.f);
      for (int32_t i = 1; i < n; i += 3) x[size_t(i)] = kNaN;  // NaNs in every lane
      if (at % 3 != 1) x[size_t(at)] = 100.f;
      int32_t want = 0;
      for (int32_t i = 1; i < n; ++i) {
        if (x[size_t(i)] > x[size_t(want)]) want = i;
      }
      expect_every_level_agrees(x, want, "NaNs between the values");
    }

    auto first_nan = random_floats(n, static_cast<uint32_t>(n + 6), 1.f);
    first_nan[0] = kNaN;
    expect_every_level_agrees(first_nan, 0, "NaN first");

    if (n < 3) continue;
    std::vector<float> inf(size_t(n), -kInf);
    expect_every_level_agrees(inf, 0, "all -inf");
    inf[size_t(n - 1)] = kInf;
    inf[size_t(n / 2)] = kInf;
    expect_every_level_agrees(inf, n / 2, "two +inf");
  }
}

TEST(Argmax, the_scalar_level_runs_the_twin_and_the_others_their_own_kernel) {
  RestoreBestLevel restore;
  ASSERT_TRUE(set_simd_level("scalar"));
  EXPECT_EQ(active_argmax(), &ref::argmax);
  for (auto level : supported_simd_levels()) {
    if (level == "scalar") continue;
    ASSERT_TRUE(set_simd_level(level));
    EXPECT_NE(active_argmax(), &ref::argmax) << level;
  }
}

}  // namespace
}  // namespace ember::tensor
