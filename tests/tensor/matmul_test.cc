#include "tensor/matmul.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tensor/quant.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::random_floats;

struct QuantizedMatrix {
  std::vector<uint8_t> bytes;
  std::vector<float> dequant;  // [rows][cols] what the weights really hold
  Matrix m;
};

QuantizedMatrix make_matrix(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  QuantizedMatrix q;
  const auto w = random_floats(rows * cols, seed);
  q.bytes.resize(row_bytes(t, cols) * static_cast<size_t>(rows));
  q.dequant.resize(w.size());
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = q.bytes.data() + static_cast<size_t>(r) * row_bytes(t, cols);
    ref::quantize_row(t, w.data() + r * cols, row, cols);
    ref::dequantize_row(t, row, q.dequant.data() + r * cols, cols);
  }
  q.m = Matrix{t, rows, cols, q.bytes.data()};
  return q;
}

TEST(Matmul, matches_a_naive_float_matmul_for_every_type_shape_token_count_and_pool_size) {
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{1, 256}, {7, 512}, {33, 256}};
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (DType t : testing::weight_types()) {
    for (const auto& s : shapes) {
      const auto q = make_matrix(t, s.rows, s.cols, 100 + static_cast<uint32_t>(s.rows));
      for (int64_t n_tokens : {1, 3, 17}) {
        const auto x = random_floats(n_tokens * s.cols, 5);
        // The activations are quantized to vec_dot_type inside matmul; the naive product uses
        // them in float, so the tolerance covers 8-bit activation rounding (fp16 for F16).
        std::vector<float> want(static_cast<size_t>(n_tokens * s.rows));
        std::vector<float> mag(want.size());
        for (int64_t tk = 0; tk < n_tokens; ++tk) {
          for (int64_t r = 0; r < s.rows; ++r) {
            double acc = 0, m = 0;
            for (int64_t c = 0; c < s.cols; ++c) {
              const double p = double(q.dequant[r * s.cols + c]) * x[tk * s.cols + c];
              acc += p, m += std::fabs(p);
            }
            want[tk * s.rows + r] = static_cast<float>(acc);
            mag[tk * s.rows + r] = static_cast<float>(m);
          }
        }
        const double rel = t == DType::F32                         ? 1e-5
                           : (t == DType::F16 || t == DType::BF16) ? 5e-3
                                                                   : 2e-2;
        for (auto& pool : pools) {
          std::vector<float> y(want.size(), NAN);
          matmul(q.m, x.data(), n_tokens, y.data(), pool);
          for (size_t i = 0; i < y.size(); ++i) {
            ASSERT_NEAR(y[i], want[i], rel * mag[i])
                << dtype_name(t) << " " << s.rows << "x" << s.cols << " n_tokens=" << n_tokens
                << " threads=" << pool.size() << " i=" << i;
          }
        }
      }
    }
  }
}

TEST(Matmul, equals_vec_dot_of_the_quantized_activation_exactly) {
  const auto q = make_matrix(DType::Q4_K, 9, 512, 1);
  const auto x = random_floats(3 * 512, 2);
  ThreadPool pool(3);
  std::vector<float> y(27);
  matmul(q.m, x.data(), 3, y.data(), pool);
  std::vector<uint8_t> a(row_bytes(DType::Q8_K, 512));
  for (int t = 0; t < 3; ++t) {
    quantize_row(DType::Q8_K, x.data() + t * 512, a.data(), 512);
    for (int r = 0; r < 9; ++r) {
      const float want =
          vec_dot(DType::Q4_K, 512, q.bytes.data() + r * row_bytes(DType::Q4_K, 512), a.data());
      EXPECT_EQ(y[t * 9 + r], want);
    }
  }
}

TEST(Matmul, get_row_returns_the_dequantized_row) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q6_K}) {
    const auto q = make_matrix(t, 5, 256, 9);
    std::vector<float> out(256);
    get_row(q.m, 3, out.data());
    for (int c = 0; c < 256; ++c) ASSERT_EQ(out[c], q.dequant[3 * 256 + c]) << dtype_name(t);
  }
}

}  // namespace
}  // namespace ember::tensor
