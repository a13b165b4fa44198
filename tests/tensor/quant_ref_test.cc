#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "tensor/quant.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::dequantized;
using testing::quantized;
using testing::random_floats;

// ---- fp16 / bf16 ----

TEST(Fp16, converts_special_values_exactly) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_fp16(inf), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-inf), 0xfc00);
  EXPECT_EQ(f32_to_fp16(1e6f), 0x7c00);      // overflow
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // halfway to 2^16 rounds (to even) up to inf
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(std::nanf("")))));
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: even is 0
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(f32_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 ulp -> 2 (even)
  EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f32_to_fp16(1e-45f), 0x0000);  // float subnormal
  // Ties between normals: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> even (1).
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(f32_to_fp16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);

  EXPECT_EQ(fp16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_f32(0xfc00), -inf);
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7e00)));
  EXPECT_TRUE(std::signbit(fp16_to_f32(0x8000)));
}

TEST(Fp16, round_trips_every_half_value) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << h;
  }
}

TEST(Bf16, converts_special_values_and_rounds_ties_to_even) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-inf), 0xff80);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
  // A NaN whose payload lives only in the low bits must stay NaN, not become inf.
  uint32_t low_nan = 0x7f800001u;
  float f;
  std::memcpy(&f, &low_nan, 4);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f))));
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));           // subnormal
  EXPECT_EQ(f32_to_bf16(std::ldexp(1.0f, -133)), 0x0001);
}

// ---- agreement with gguf-py (llama.cpp's own Python implementation) ----

std::vector<uint8_t> from_hex(const std::string& s) {
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = std::stoi(s.substr(2 * i, 2), nullptr, 16);
  return out;
}

TEST(QuantGolden, block_layouts_decode_like_llama_cpp_and_legacy_quantizers_match_bitwise) {
  std::ifstream in(EMBER_SOURCE_DIR "/tests/tensor/golden/quant_golden.txt");
  ASSERT_TRUE(in.good());
  std::string line;
  int dequant_records = 0, quant_records = 0;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string kind, type_name;
    ss >> kind >> type_name;
    const auto t = dtype_from_name(type_name);
    ASSERT_TRUE(t.has_value()) << type_name;
    if (kind == "dequant") {
      std::string hex;
      ss >> hex;
      const auto bytes = from_hex(hex);
      std::vector<float> want;
      for (float v; ss >> v;) want.push_back(v);
      const auto n = static_cast<int64_t>(want.size());
      ASSERT_EQ(bytes.size(), row_bytes(*t, n));
      const auto got = dequantized(*t, bytes.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-30f)
            << type_name << " element " << i;
      }
      ++dequant_records;
    } else {
      std::vector<float> x;
      std::string tok;
      while (ss >> tok && tok != "|") x.push_back(std::stof(tok));
      std::string hex;
      ss >> hex;
      EXPECT_EQ(quantized(*t, x), from_hex(hex)) << type_name;
      ++quant_records;
    }
  }
  EXPECT_EQ(dequant_records, 30);
  EXPECT_GE(quant_records, 3);
}

// ---- quantize -> dequantize error, per type ----

struct ErrorBound {
  DType type;
  double max_rel_rmse;  // RMS error relative to the RMS of the input (standard normal data)
};

TEST(Quant, dequantize_of_quantize_is_close_to_the_input_for_every_type) {
  const ErrorBound bounds[] = {
      {DType::F32, 0.0},    {DType::F16, 0.0006}, {DType::BF16, 0.004}, {DType::Q8_0, 0.006},
      {DType::Q8_1, 0.006}, {DType::Q8_K, 0.009}, {DType::Q4_0, 0.11},  {DType::Q4_1, 0.10},
      {DType::Q5_0, 0.054}, {DType::Q5_1, 0.048}, {DType::Q2_K, 0.35},  {DType::Q3_K, 0.19},
      {DType::Q4_K, 0.09},  {DType::Q5_K, 0.045}, {DType::Q6_K, 0.023},
  };
  const int64_t n = 4096;
  const auto x = random_floats(n, 7);
  for (const auto& b : bounds) {
    const auto q = quantized(b.type, x);
    const auto y = dequantized(b.type, q.data(), n);
    double err = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) err += (y[i] - x[i]) * (y[i] - x[i]), norm += x[i] * x[i];
    const double rel = std::sqrt(err / norm);
    EXPECT_LE(rel, b.max_rel_rmse) << dtype_name(b.type);
    RecordProperty(std::string(dtype_name(b.type)), std::to_string(rel));
  }
}

TEST(Quant, all_zero_rows_quantize_to_exact_zeros) {
  const int64_t n = 512;
  const std::vector<float> x(n, 0.0f);
  for (DType t : testing::weight_types()) {
    const auto y = dequantized(t, quantized(t, x).data(), n);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// ---- ref::vec_dot against a float dot of the dequantized operands ----

TEST(QuantRef, vec_dot_equals_float_dot_of_dequantized_operands) {
  const int64_t n = 1024;
  const auto w = random_floats(n, 11);
  const auto a = random_floats(n, 12, 3.0f);
  for (DType t : testing::weight_types()) {
    const DType at = vec_dot_type(t);
    const auto wq = quantized(t, w);
    const auto aq = quantized(at, a);
    const auto wd = dequantized(t, wq.data(), n);
    const auto ad = dequantized(at, aq.data(), n);
    double want = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) want += double(wd[i]) * ad[i], mag += std::fabs(wd[i] * ad[i]);
    const float got = ref::vec_dot(t, n, wq.data(), aq.data());
    // Integer sums are exact; what remains is float scaling per block, except Q4_1/Q5_1 whose
    // activation sum term is stored as fp16 (ggml's Q8_1 `s`), about 2^-11 relative per block.
    const bool fp16_sum = t == DType::Q4_1 || t == DType::Q5_1;
    EXPECT_NEAR(got, want, (fp16_sum ? 2e-3 : 1e-5) * mag) << dtype_name(t);
  }
}

TEST(QuantRef, vec_dot_types_follow_llama_cpp) {
  EXPECT_EQ(vec_dot_type(DType::F32), DType::F32);
  EXPECT_EQ(vec_dot_type(DType::F16), DType::F16);
  EXPECT_EQ(vec_dot_type(DType::BF16), DType::BF16);
  EXPECT_EQ(vec_dot_type(DType::Q4_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q5_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q8_0), DType::Q8_0);
  EXPECT_EQ(vec_dot_type(DType::Q4_1), DType::Q8_1);
  EXPECT_EQ(vec_dot_type(DType::Q5_1), DType::Q8_1);
  EXPECT_EQ(vec_dot_type(DType::Q4_K), DType::Q8_K);
  EXPECT_EQ(vec_dot_type(DType::Q6_K), DType::Q8_K);
}

TEST(QuantRef, q8_k_block_sums_match_its_values) {
  const auto x = random_floats(512, 3);
  const auto q = quantized(DType::Q8_K, x);
  const auto y = dequantized(DType::Q8_K, q.data(), 512);
  for (int b = 0; b < 2; ++b) {
    const uint8_t* blk = q.data() + b * block_bytes(DType::Q8_K);
    float d;
    std::memcpy(&d, blk, 4);
    for (int g = 0; g < 16; ++g) {
      int16_t bsum;
      std::memcpy(&bsum, blk + 4 + 256 + 2 * g, 2);
      int s = 0;
      for (int k = 0; k < 16; ++k) s += static_cast<int8_t>(blk[4 + 16 * g + k]);
      EXPECT_EQ(bsum, s);
    }
  }
}

}  // namespace
}  // namespace ember::tensor
