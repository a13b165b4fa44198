// Type ids, names and block geometry. Sizes follow ggml's block structs exactly (ggml-common.h),
// so GGUF tensor data can be used in place.
#include "tensor/dtype.h"

#include <array>
#include <cctype>

#include "base/result.h"

namespace ember::tensor {
namespace {

struct TypeInfo {
  DType type;
  std::string_view name;
  int64_t block_elems;
  size_t block_bytes;
};

// clang-format off
constexpr std::array<TypeInfo, 15> kTypes = {{
    {DType::F32,  "F32",  1,   4},
    {DType::F16,  "F16",  1,   2},
    {DType::Q4_0, "Q4_0", 32,  2 + 16},
    {DType::Q4_1, "Q4_1", 32,  2 + 2 + 16},
    {DType::Q5_0, "Q5_0", 32,  2 + 4 + 16},
    {DType::Q5_1, "Q5_1", 32,  2 + 2 + 4 + 16},
    {DType::Q8_0, "Q8_0", 32,  2 + 32},
    {DType::Q8_1, "Q8_1", 32,  2 + 2 + 32},
    {DType::Q2_K, "Q2_K", 256, 16 + 64 + 2 + 2},
    {DType::Q3_K, "Q3_K", 256, 32 + 64 + 12 + 2},
    {DType::Q4_K, "Q4_K", 256, 2 + 2 + 12 + 128},
    {DType::Q5_K, "Q5_K", 256, 2 + 2 + 12 + 32 + 128},
    {DType::Q6_K, "Q6_K", 256, 128 + 64 + 16 + 2},
    {DType::Q8_K, "Q8_K", 256, 4 + 256 + 16 * 2},
    {DType::BF16, "BF16", 1,   2},
}};
// clang-format on

const TypeInfo& info(DType t) {
  for (const auto& i : kTypes) {
    if (i.type == t) return i;
  }
  EMBER_ASSERT(false && "unknown DType");
  return kTypes[0];
}

}  // namespace

std::optional<DType> dtype_from_gguf(uint32_t id) {
  for (const auto& i : kTypes) {
    if (static_cast<uint32_t>(i.type) == id) return i.type;
  }
  return std::nullopt;
}

std::string_view dtype_name(DType t) {
  return info(t).name;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kTypes) {
    if (i.name.size() != name.size()) continue;
    bool same = true;
    for (size_t k = 0; k < name.size() && same; ++k) {
      same = std::toupper(static_cast<unsigned char>(name[k])) == i.name[k];
    }
    if (same) return i.type;
  }
  return std::nullopt;
}

int64_t block_elems(DType t) {
  return info(t).block_elems;
}
size_t block_bytes(DType t) {
  return info(t).block_bytes;
}

}  // namespace ember::tensor
