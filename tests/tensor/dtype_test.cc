#include "tensor/dtype.h"

#include <gtest/gtest.h>

namespace ember::tensor {
namespace {

TEST(DType, converts_known_gguf_ids_and_rejects_unknown_ones) {
  EXPECT_EQ(dtype_from_gguf(0), DType::F32);
  EXPECT_EQ(dtype_from_gguf(12), DType::Q4_K);
  EXPECT_EQ(dtype_from_gguf(30), DType::BF16);
  EXPECT_FALSE(dtype_from_gguf(4).has_value());   // removed Q4_2
  EXPECT_FALSE(dtype_from_gguf(16).has_value());  // IQ2_XXS: unsupported
  EXPECT_FALSE(dtype_from_gguf(1000).has_value());
}

TEST(DType, block_sizes_match_ggml_block_structs) {
  EXPECT_EQ(block_bytes(DType::F32), 4u);
  EXPECT_EQ(block_bytes(DType::Q4_0), 18u);
  EXPECT_EQ(block_bytes(DType::Q4_1), 20u);
  EXPECT_EQ(block_bytes(DType::Q5_0), 22u);
  EXPECT_EQ(block_bytes(DType::Q5_1), 24u);
  EXPECT_EQ(block_bytes(DType::Q8_0), 34u);
  EXPECT_EQ(block_bytes(DType::Q8_1), 36u);
  EXPECT_EQ(block_bytes(DType::Q2_K), 84u);
  EXPECT_EQ(block_bytes(DType::Q3_K), 110u);
  EXPECT_EQ(block_bytes(DType::Q4_K), 144u);
  EXPECT_EQ(block_bytes(DType::Q5_K), 176u);
  EXPECT_EQ(block_bytes(DType::Q6_K), 210u);
  EXPECT_EQ(block_bytes(DType::Q8_K), 292u);
  EXPECT_EQ(block_elems(DType::Q6_K), 256);
  EXPECT_EQ(block_elems(DType::Q5_0), 32);
  EXPECT_EQ(block_elems(DType::BF16), 1);
  EXPECT_EQ(row_bytes(DType::Q4_K, 4096), 16u * 144u);
}

TEST(DType, names_round_trip_case_insensitively) {
  for (uint32_t id = 0; id < 40; ++id) {
    auto t = dtype_from_gguf(id);
    if (!t) continue;
    EXPECT_EQ(dtype_from_name(dtype_name(*t)), *t);
  }
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("bf16"), DType::BF16);
  EXPECT_FALSE(dtype_from_name("Q4").has_value());
  EXPECT_FALSE(dtype_from_name("").has_value());
}

}  // namespace
}  // namespace ember::tensor
