// Run-time selected SIMD kernels, by instruction-set level. Each level's function returns, per
// type id, the kernels it has (nullptr where it has none: the level below, and finally the
// scalar reference, fills the gap). quant.cc stacks them: scalar <- avx2 <- avx512-vnni <-
// avx512-amx. Internal to the tensor layer.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember::tensor {
template <typename T>
struct KvSegmentOf;  // attention.h
using KvSegment = KvSegmentOf<float>;
using KvSegmentF16 = KvSegmentOf<uint16_t>;
}  // namespace ember::tensor

namespace ember::tensor::simd {

constexpr size_t kTypeSlots = 31;

// A GEMM micro-kernel: y[t * y_stride + r] = vec_dot(n, w + r * w_stride, a + t * a_stride) for
// r < nr <= max_rows, t < nt <= max_tokens (activations already quantized to vec_dot_type).
using GemmTile = void (*)(int64_t n, const uint8_t* w, size_t w_stride, int nr, const uint8_t* a,
                          size_t a_stride, int nt, float* y, size_t y_stride);
// Optional path for many tokens (prefill): pack(n, w, w_stride, nr, buf) unpacks nr <= pack_rows
// weight rows once into buf (pack_bytes(n) bytes, any alignment), then packed(n, buf, nr, a,
// a_stride, nt, y, y_stride) dots every one of nt tokens against them, with the same result
// contract as a tile. Unpacking once per row block instead of once per few tokens is what makes
// it cheaper than the tiles.
using PackFn = void (*)(int64_t n, const uint8_t* w, size_t w_stride, int nr, uint8_t* buf);
using PackedTile = void (*)(int64_t n, const uint8_t* buf, int nr, const uint8_t* a,
                            size_t a_stride, int64_t nt, float* y, size_t y_stride);
// With nt == 1 matmul hands a tile decode_rows <= max_rows rows: one row streams best where the
// one-row tile keeps up with memory (see IsaAvx2::decode_rows).
// rows(n, w, w_stride, nrows, a, y): y[r] = vec_dot(n, w + r * w_stride, a) for r < nrows, by
// the 1 x 1 tile row after row (decode where decode_rows == 1).
using RowsFn = void (*)(int64_t n, const uint8_t* w, size_t w_stride, int64_t nrows,
                        const uint8_t* a, float* y);
// Optional prefill path that packs and dots a whole run of rows in one call (a matmul task),
// so that per-call work on the activations is paid once per task: y[t * y_stride + r] for
// r < nrows, t < nt; rows are handed in runs of pack_rows except at the matrix end.
using PackedRunFn = void (*)(int64_t n, const uint8_t* w, size_t w_stride, int64_t nrows,
                             const uint8_t* a, size_t a_stride, int64_t nt, float* y,
                             size_t y_stride);
// Optional path for weights in the interleaved layout (tensor/interleave.h) with
// interleave_rows rows per group: w is the first of nrows / interleave_rows whole groups;
// y[t * y_stride + r] for r < nrows, t < nt, any nt >= 1 (decode too). Bit-identical to the
// level's tile for each (row, token). `prep` is interleaved_prepare's result for the same a,
// a_stride and nt (and n): the per-token work on the activations, done once per matmul by its
// caller and read by every task, instead of once per task.
using InterleavedRunFn = void (*)(int64_t n, const uint8_t* w, int64_t nrows, const uint8_t* a,
                                  size_t a_stride, int64_t nt, const void* prep, float* y,
                                  size_t y_stride);
// Prepares the activations a (nt tokens, a_stride apart, n columns) for interleaved_run into
// the calling thread's scratch for this kernel; the result stays valid, and unchanged, until
// the next call of the same kernel's prepare on the same thread.
using InterleavedPrepareFn = const void* (*)(int64_t n, const uint8_t* a, size_t a_stride,
                                             int64_t nt);
struct GemmKernel {
  GemmTile tile = nullptr;
  int max_rows = 0;
  int max_tokens = 0;
  int decode_rows = 0;
  RowsFn rows = nullptr;
  PackFn pack = nullptr;  // with packed and pack_bytes, or all three null
  PackedTile packed = nullptr;
  size_t (*pack_bytes)(int64_t n) = nullptr;
  int pack_rows = 0;
  PackedRunFn packed_run = nullptr;            // instead of pack + packed (with pack_rows)
  int pack_min_tokens = 0;                     // below this, the plain tiles
  InterleavedRunFn interleaved_run = nullptr;  // with interleave_rows and interleaved_prepare
  InterleavedPrepareFn interleaved_prepare = nullptr;
  int interleave_rows = 0;
  bool has_packed() const { return packed != nullptr || packed_run != nullptr; }
};

// The non-matmul kernels (attention.h, activation.h, norm.h), same signatures as their public
// entry. The attention kernel is the segmented form (attend_group_segments); the contiguous form is
// one segment.
using AttendGroupFn = void (*)(const float* q, int64_t q_stride, int32_t nq, const KvSegment* segs,
                               int32_t n_segs, int64_t kv_stride, int32_t n, int32_t hd,
                               float scale, float* scores, float* out, int64_t out_stride,
                               float* stats, float softcap);
using AttendGroupF16Fn = void (*)(const float* q, int64_t q_stride, int32_t nq,
                                  const KvSegmentF16* segs, int32_t n_segs, int64_t kv_stride,
                                  int32_t n, int32_t hd, float scale, float* scores, float* out,
                                  int64_t out_stride, float* stats, float softcap);
using GeluMulFn = void (*)(float* gate, const float* up, int64_t n);
using SiluMulFn = void (*)(float* gate, const float* up, int64_t n);
using RmsNormFn = void (*)(const float* x, const float* w, float* out, int64_t n, float eps);
using ArgmaxFn = int32_t (*)(const float* x, int32_t n);

struct KernelOverrides {
  std::array<void (*)(const void*, float*, int64_t), kTypeSlots> dequant{};
  std::array<void (*)(const float*, void*, int64_t), kTypeSlots> quant{};
  std::array<float (*)(int64_t, const void*, const void*), kTypeSlots> dot{};
  std::array<GemmKernel, kTypeSlots> gemm{};
  AttendGroupFn attend_group = nullptr;
  AttendGroupF16Fn attend_group_f16 = nullptr;
  GeluMulFn gelu_mul = nullptr;
  SiluMulFn silu_mul = nullptr;
  RmsNormFn rms_norm = nullptr;
  ArgmaxFn argmax = nullptr;
};

// AVX2 + FMA + F16C (quant_avx2.cc, gemm_avx2.cc).
bool cpu_has_avx2();
KernelOverrides avx2_kernels();
void add_avx2_gemm(KernelOverrides* o);
void add_avx2_attention(KernelOverrides* o);    // attention_avx2.cc
void add_avx2_activations(KernelOverrides* o);  // activation.cc
void add_avx2_norm(KernelOverrides* o);         // norm.cc
void add_avx2_argmax(KernelOverrides* o);       // argmax.cc
// AVX-512 F/BW/VL/DQ + VNNI (quant_avx512.cc).
bool cpu_has_avx512_vnni();
KernelOverrides avx512_kernels();
void add_avx512_activations(KernelOverrides* o);  // activation.cc
// AMX-INT8, with the tile state granted to this process (quant_avx512.cc): avx512-vnni's
// kernels, with tile products for the interleaved legacy types at many tokens.
bool cpu_has_amx();
KernelOverrides amx_kernels();

}  // namespace ember::tensor::simd

namespace ember::tensor {
enum class DType : uint32_t;
// The vec_dot kernel quant.h's vec_dot would call now (SIMD or reference), resolved once so a
// matmul's inner loop skips the per-call dispatch.
using DotKernel = float (*)(int64_t n, const void* w_row, const void* act_row);
DotKernel active_dot_kernel(DType w);
// The GEMM tile of the active level for weight type w ({} when only vec_dot exists).
simd::GemmKernel active_gemm_kernel(DType w);
// The active level's attention, GELU, SiLU and RMS norm kernels (the scalar references at level
// "scalar").
simd::AttendGroupFn active_attend_group();
simd::AttendGroupF16Fn active_attend_group_f16();
simd::GeluMulFn active_gelu_mul();
simd::SiluMulFn active_silu_mul();
simd::RmsNormFn active_rms_norm();
simd::ArgmaxFn active_argmax();
}  // namespace ember::tensor
