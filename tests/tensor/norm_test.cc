// rms_norm: the scalar twin against the formula in double, and every level bit for bit against
// the twin (norm.h's lane order), in place and not, with tails shorter than a vector.
#include "tensor/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::random_floats;
using testing::RestoreBestLevel;

constexpr int64_t kWidths[] = {1, 7, 8, 9, 64, 256, 576, 640, 1003};

TEST(RmsNorm, the_scalar_twin_is_x_over_its_root_mean_square_times_the_weight) {
  for (int64_t n : kWidths) {
    const auto x = random_floats(n, static_cast<uint32_t>(n), 3.f);
    const auto w = random_floats(n, static_cast<uint32_t>(n + 1));
    std::vector<float> out(static_cast<size_t>(n));
    const float eps = 1e-6f;
    ref::rms_norm(x.data(), w.data(), out.data(), n, eps);
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double s = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(out[size_t(i)], x[size_t(i)] * s * w[size_t(i)],
                  1e-6 * std::fabs(x[size_t(i)] * s * w[size_t(i)]) + 1e-30)
          << "n=" << n << " i=" << i;
    }
  }
}

TEST(RmsNorm, every_level_is_bit_identical_to_the_scalar_twin_in_place_or_not) {
  RestoreBestLevel restore;
  for (int64_t n : kWidths) {
    // Magnitudes spread over many binades, so the sum's rounding depends on its order.
    auto x = random_floats(n, static_cast<uint32_t>(7 * n), 1.f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] *= std::ldexp(1.f, static_cast<int>(i % 23) - 11);
    const auto w = random_floats(n, static_cast<uint32_t>(7 * n + 1));
    std::vector<float> want(static_cast<size_t>(n));
    ref::rms_norm(x.data(), w.data(), want.data(), n, 1e-5f);
    for (auto level : supported_simd_levels()) {
      ASSERT_TRUE(set_simd_level(level));
      std::vector<float> got(static_cast<size_t>(n), NAN), in_place = x;
      rms_norm(x.data(), w.data(), got.data(), n, 1e-5f);
      rms_norm(in_place.data(), w.data(), in_place.data(), n, 1e-5f);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << level << " n=" << n << " i=" << i;
        ASSERT_EQ(in_place[i], want[i]) << level << " in place, n=" << n << " i=" << i;
      }
    }
  }
}

TEST(RmsNorm, the_scalar_level_runs_the_twin_and_the_others_their_own_kernel) {
  RestoreBestLevel restore;
  ASSERT_TRUE(set_simd_level("scalar"));
  EXPECT_EQ(active_rms_norm(), &ref::rms_norm);
  for (auto level : supported_simd_levels()) {
    if (level == "scalar") continue;
    ASSERT_TRUE(set_simd_level(level));
    EXPECT_NE(active_rms_norm(), &ref::rms_norm) << level;
  }
}

}  // namespace
}  // namespace ember::tensor
