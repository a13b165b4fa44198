#include "tensor/quant_simd.h"
namespace ember::tensor::simd {
KernelOverrides best_kernels() {
  return {};
}
std::string_view level_name() {
  return "scalar";
}
}  // namespace ember::tensor::simd
