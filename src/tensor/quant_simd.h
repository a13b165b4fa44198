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

namespace ember::tensor {
enum class DType : uint32_t;
// The vec_dot kernel quant.h's vec_dot would call now (SIMD or reference), resolved once so a
// matmul's inner loop skips the per-call dispatch.
using DotKernel = float (*)(int64_t n, const void* w_row, const void* act_row);
DotKernel active_dot_kernel(DType w);
}  // namespace ember::tensor
