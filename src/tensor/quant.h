// Quantize / dequantize rows and the dot-product kernels that matmuls are built from.
// The scalar functions in quant_ref.cc are the definition of correct; SIMD versions (chosen at
// run time) must agree with them (tests/tensor compares across sizes and misalignments).
//
// Activations are quantized before a dot product, as llama.cpp does: each weight type has a
// "vec_dot_type" (F32 -> F32, F16 -> F16, BF16 -> BF16, Q4_0/Q5_0/Q8_0 -> Q8_0,
// Q4_1/Q5_1 -> Q8_1, K types -> Q8_K).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "tensor/dtype.h"

namespace ember::tensor {

// dst gets n floats; n must be a multiple of block_elems(t).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// dst gets row_bytes(t, n) bytes (round-to-nearest as llama.cpp's reference quantizers).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

DType vec_dot_type(DType weight);
// Dot product of one weight row (type w) with one activation row already quantized to
// vec_dot_type(w); n elements. Rows (here and above) must be aligned for their element type
// (4 bytes for F32 and Q8_K, 2 for the others), as GGUF data is; no vector alignment is needed.
float vec_dot(DType w, int64_t n, const void* w_row, const void* act_row);

// Scalar references, always available (tests compare the dispatched kernels to these).
namespace ref {
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
void quantize_row(DType t, const float* src, void* dst, int64_t n);
float vec_dot(DType w, int64_t n, const void* w_row, const void* act_row);
}  // namespace ref

// IEEE half / bfloat16 conversions (exact, round-to-nearest-even on the way down).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// SIMD kernels are used when the CPU has them, unless switched off (tests compare both paths;
// process-wide, meant for tests and benchmarks, not for flipping while kernels run).
void set_simd_enabled(bool enabled);
bool simd_enabled();
// The instruction set the dispatched kernels use: "avx512-amx", "avx512-vnni", "avx2" or
// "scalar".
std::string_view simd_level();
// Selects a level by name (one of supported_simd_levels()); false, and no change, for a level
// this CPU lacks or an unknown name. set_simd_enabled(true) goes back to the best level.
bool set_simd_level(std::string_view level);
// The levels this CPU can run, lowest first ("scalar" always).
std::vector<std::string_view> supported_simd_levels();
// set_simd_level for a setting (`--simd-level`; empty: leave the level as it is). The error names
// the level asked for and the ones this CPU has.
Status select_simd_level(std::string_view level);

}  // namespace ember::tensor
