// Run-time selected SIMD kernels. best_kernels() inspects the CPU once and returns, per type id,
// the fastest kernel available (nullptr where the scalar reference is the only one).
// Internal to the tensor layer.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ember::tensor::simd {

constexpr size_t kTypeSlots = 31;

struct KernelOverrides {
  std::array<void (*)(const void*, float*, int64_t), kTypeSlots> dequant{};
  std::array<void (*)(const float*, void*, int64_t), kTypeSlots> quant{};
  std::array<float (*)(int64_t, const void*, const void*), kTypeSlots> dot{};
};

KernelOverrides best_kernels();
std::string_view level_name();

}  // namespace ember::tensor::simd
