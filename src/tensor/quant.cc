// Type-keyed dispatch for quantize / dequantize / vec_dot / GEMM tiles: the scalar references
// (ref::) and the run-time-selected SIMD kernels per instruction-set level (quant_avx2.cc,
// gemm_avx2.cc, quant_avx512.cc), plus the fp16/bf16 conversions.
#include "tensor/quant.h"

#include <array>
#include <atomic>
#include <vector>

#include "base/result.h"
#include "tensor/activation.h"
#include "tensor/argmax.h"
#include "tensor/attention.h"
#include "tensor/norm.h"
#include "tensor/quant_blocks.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {
namespace {

struct Kernels {
  void (*dequant)(const void*, float*, int64_t) = nullptr;
  void (*quant)(const float*, void*, int64_t) = nullptr;
  float (*dot)(int64_t, const void*, const void*) = nullptr;
  DType vdt = DType::F32;
};

constexpr size_t kMaxId = 31;

std::array<Kernels, kMaxId> make_ref_table() {
  using namespace refk;
  std::array<Kernels, kMaxId> t{};
  auto set = [&](DType d, Kernels k) { t[static_cast<size_t>(d)] = k; };
  set(DType::F32, {dequant_f32, quant_f32, dot_f32, DType::F32});
  set(DType::F16, {dequant_f16, quant_f16, dot_f16, DType::F16});
  set(DType::BF16, {dequant_bf16, quant_bf16, dot_bf16, DType::BF16});
  set(DType::Q4_0, {dequant_q4_0, quant_q4_0, dot_q4_0, DType::Q8_0});
  set(DType::Q4_1, {dequant_q4_1, quant_q4_1, dot_q4_1, DType::Q8_1});
  set(DType::Q5_0, {dequant_q5_0, quant_q5_0, dot_q5_0, DType::Q8_0});
  set(DType::Q5_1, {dequant_q5_1, quant_q5_1, dot_q5_1, DType::Q8_1});
  set(DType::Q8_0, {dequant_q8_0, quant_q8_0, dot_q8_0, DType::Q8_0});
  set(DType::Q8_1, {dequant_q8_1, quant_q8_1, nullptr, DType::Q8_1});
  set(DType::Q2_K, {dequant_q2_k, quant_q2_k, dot_q2_k, DType::Q8_K});
  set(DType::Q3_K, {dequant_q3_k, quant_q3_k, dot_q3_k, DType::Q8_K});
  set(DType::Q4_K, {dequant_q4_k, quant_q4_k, dot_q4_k, DType::Q8_K});
  set(DType::Q5_K, {dequant_q5_k, quant_q5_k, dot_q5_k, DType::Q8_K});
  set(DType::Q6_K, {dequant_q6_k, quant_q6_k, dot_q6_k, DType::Q8_K});
  set(DType::Q8_K, {dequant_q8_k, quant_q8_k, nullptr, DType::Q8_K});
  return t;
}

const std::array<Kernels, kMaxId>& ref_table() {
  static const auto table = make_ref_table();
  return table;
}

// Instruction-set levels, each table the one below with that level's kernels swapped in.
enum Level : int { kScalar = 0, kAvx2 = 1, kAvx512Vnni = 2, kAvx512Amx = 3, kLevels = 4 };
constexpr std::string_view kLevelNames[kLevels] = {"scalar", "avx2", "avx512-vnni", "avx512-amx"};

struct Table {
  std::array<Kernels, kMaxId> k;
  std::array<simd::GemmKernel, kMaxId> gemm{};
  simd::AttendGroupFn attend_group = &ref::attend_group_segments;
  simd::AttendGroupF16Fn attend_group_f16 = &ref::attend_group_segments;
  simd::GeluMulFn gelu_mul = &ref::gelu_mul;
  simd::SiluMulFn silu_mul = &ref::silu_mul;
  simd::RmsNormFn rms_norm = &ref::rms_norm;
  simd::ArgmaxFn argmax = &ref::argmax;
};

void apply(Table* t, const simd::KernelOverrides& o) {
  for (size_t i = 0; i < kMaxId; ++i) {
    if (o.dequant[i]) t->k[i].dequant = o.dequant[i];
    if (o.quant[i]) t->k[i].quant = o.quant[i];
    if (o.dot[i]) t->k[i].dot = o.dot[i];
    if (o.gemm[i].tile) t->gemm[i] = o.gemm[i];
  }
  if (o.attend_group) t->attend_group = o.attend_group;
  if (o.attend_group_f16) t->attend_group_f16 = o.attend_group_f16;
  if (o.gelu_mul) t->gelu_mul = o.gelu_mul;
  if (o.silu_mul) t->silu_mul = o.silu_mul;
  if (o.rms_norm) t->rms_norm = o.rms_norm;
  if (o.argmax) t->argmax = o.argmax;
}

bool cpu_supports(int level) {
  switch (level) {
    case kScalar:
      return true;
    case kAvx2:
      return simd::cpu_has_avx2();
    case kAvx512Vnni:
      return simd::cpu_has_avx512_vnni();
    case kAvx512Amx:
      return simd::cpu_has_amx();
    default:
      return false;
  }
}

int best_level() {
  int best = kScalar;
  for (int l = 0; l < kLevels; ++l) {
    if (cpu_supports(l)) best = l;
  }
  return best;
}

std::array<Table, kLevels> make_tables() {
  std::array<Table, kLevels> t;
  t[kScalar].k = ref_table();
  t[kAvx2] = t[kScalar];
  if (cpu_supports(kAvx2)) apply(&t[kAvx2], simd::avx2_kernels());
  t[kAvx512Vnni] = t[kAvx2];
  if (cpu_supports(kAvx512Vnni)) apply(&t[kAvx512Vnni], simd::avx512_kernels());
  t[kAvx512Amx] = t[kAvx512Vnni];
  if (cpu_supports(kAvx512Amx)) apply(&t[kAvx512Amx], simd::amx_kernels());
  return t;
}

const Table& table_of(int level) {
  static const auto tables = make_tables();
  return tables[static_cast<size_t>(level)];
}

std::atomic<int> g_level{best_level()};

const Kernels& kernels_of(const std::array<Kernels, kMaxId>& table, DType t) {
  const auto id = static_cast<size_t>(t);
  EMBER_ASSERT(id < kMaxId && table[id].dequant != nullptr);
  return table[id];
}

const Table& active_table() {
  return table_of(g_level.load(std::memory_order_relaxed));
}

const Kernels& active(DType t) {
  return kernels_of(active_table().k, t);
}

void check_len(DType t, int64_t n) {
  EMBER_ASSERT(n >= 0 && n % block_elems(t) == 0);
}

}  // namespace

void set_simd_enabled(bool enabled) {
  g_level.store(enabled ? best_level() : kScalar, std::memory_order_relaxed);
}
bool simd_enabled() {
  return g_level.load(std::memory_order_relaxed) != kScalar;
}
std::string_view simd_level() {
  return kLevelNames[g_level.load(std::memory_order_relaxed)];
}
bool set_simd_level(std::string_view level) {
  for (int l = 0; l < kLevels; ++l) {
    if (kLevelNames[l] == level && cpu_supports(l)) {
      g_level.store(l, std::memory_order_relaxed);
      return true;
    }
  }
  return false;
}
std::vector<std::string_view> supported_simd_levels() {
  std::vector<std::string_view> out;
  for (int l = 0; l < kLevels; ++l) {
    if (cpu_supports(l)) out.push_back(kLevelNames[l]);
  }
  return out;
}

Status select_simd_level(std::string_view level) {
  if (level.empty() || set_simd_level(level)) return {};
  std::string have;
  for (auto l : supported_simd_levels()) have += (have.empty() ? "" : ", ") + std::string(l);
  return fail("--simd-level: '{}' is not a level this CPU has (it has: {})", level, have);
}

DType vec_dot_type(DType weight) {
  return kernels_of(ref_table(), weight).vdt;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_len(t, n);
  active(t).dequant(src, dst, n);
}
void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_len(t, n);
  active(t).quant(src, dst, n);
}
float vec_dot(DType w, int64_t n, const void* w_row, const void* act_row) {
  check_len(w, n);
  const auto& k = active(w);
  EMBER_ASSERT(k.dot != nullptr);  // Q8_1 / Q8_K are activation types only
  return k.dot(n, w_row, act_row);
}

DotKernel active_dot_kernel(DType w) {
  const auto& k = active(w);
  EMBER_ASSERT(k.dot != nullptr);
  return k.dot;
}

simd::GemmKernel active_gemm_kernel(DType w) {
  const auto id = static_cast<size_t>(w);
  EMBER_ASSERT(id < kMaxId);
  return active_table().gemm[id];
}

simd::AttendGroupFn active_attend_group() {
  return active_table().attend_group;
}

simd::AttendGroupF16Fn active_attend_group_f16() {
  return active_table().attend_group_f16;
}

simd::GeluMulFn active_gelu_mul() {
  return active_table().gelu_mul;
}

simd::SiluMulFn active_silu_mul() {
  return active_table().silu_mul;
}

simd::RmsNormFn active_rms_norm() {
  return active_table().rms_norm;
}

simd::ArgmaxFn active_argmax() {
  return active_table().argmax;
}

namespace ref {
void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_len(t, n);
  kernels_of(ref_table(), t).dequant(src, dst, n);
}
void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_len(t, n);
  kernels_of(ref_table(), t).quant(src, dst, n);
}
float vec_dot(DType w, int64_t n, const void* w_row, const void* act_row) {
  check_len(w, n);
  const auto& k = kernels_of(ref_table(), w);
  EMBER_ASSERT(k.dot != nullptr);
  return k.dot(n, w_row, act_row);
}
}  // namespace ref

float fp16_to_f32(uint16_t h) {
  return half_to_float(h);
}
uint16_t f32_to_fp16(float f) {
  return float_to_half(f);
}
float bf16_to_f32(uint16_t h) {
  return bfloat_to_float(h);
}
uint16_t f32_to_bf16(float f) {
  return float_to_bfloat(f);
}

}  // namespace ember::tensor
