// Tensor element types and their block layouts. Numbering follows GGUF's (ggml's) type ids so a
// GGUF tensor's type field converts directly. A "block" is the unit of quantization: a row of n
// elements takes n / block_elems(t) blocks of block_bytes(t) bytes each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ember::tensor {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

// Known types only; nullopt for a GGUF type id ember does not support.
std::optional<DType> dtype_from_gguf(uint32_t id);
std::string_view dtype_name(DType t);                         // "F32", "Q4_K", ...
std::optional<DType> dtype_from_name(std::string_view name);  // case-insensitive
int64_t block_elems(DType t);  // 1 for F32/F16/BF16, 32, or 256 (K types)
size_t block_bytes(DType t);
// Bytes of one row of n elements; n must be a multiple of block_elems(t).
inline size_t row_bytes(DType t, int64_t n) {
  return static_cast<size_t>(n / block_elems(t)) * block_bytes(t);
}

}  // namespace ember::tensor
