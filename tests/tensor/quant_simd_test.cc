// The dispatched (SIMD) kernels against the scalar references, across sizes and misalignments.
#include <cpuid.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "tensor/quant.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::random_floats;

// Copies bytes to a buffer at `offset` bytes past a 64-byte boundary (offsets are multiples of
// the type's natural alignment: vector loads must cope with any of those).
struct Misaligned {
  std::vector<uint8_t> storage;
  uint8_t* p;
  Misaligned(const std::vector<uint8_t>& src, size_t offset) : storage(src.size() + 128) {
    auto base = reinterpret_cast<uintptr_t>(storage.data());
    p = storage.data() + ((64 - base % 64) % 64) + offset;
    std::memcpy(p, src.data(), src.size());
  }
};

class SimdOn {
 public:
  SimdOn() { set_simd_enabled(true); }
  ~SimdOn() { set_simd_enabled(true); }
};

// Every SIMD level this CPU can run (not "scalar": that is the reference itself).
std::vector<std::string_view> simd_levels() {
  std::vector<std::string_view> out;
  for (auto l : supported_simd_levels()) {
    if (l != "scalar") out.push_back(l);
  }
  return out;
}

std::vector<int64_t> sizes_for(DType t) {
  const int64_t b = t == DType::F32 || t == DType::F16 || t == DType::BF16 ? 32 : block_elems(t);
  std::vector<int64_t> out;
  if (block_elems(t) == 1) {
    for (int64_t n = 1; n <= 40; ++n) out.push_back(n);  // every tail length
  }
  for (int64_t k = 1; k <= 5; ++k) out.push_back(k * b);
  out.push_back(4096 + b);
  out.push_back(11008);
  return out;
}

TEST(QuantSimd, reports_the_best_instruction_set_by_default) {
  SimdOn guard;
  const auto level = simd_level();
  // F16C from CPUID leaf 1 (ECX bit 29): clang 16's __builtin_cpu_supports knows no "f16c".
  unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
  const bool f16c = __get_cpuid(1, &a1, &b1, &c1, &d1) && (c1 & (1u << 29)) != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  const bool vnni = avx2 && __builtin_cpu_supports("avx512f") &&
                    __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool amx_cpu = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (3u << 24)) == (3u << 24);
  if (vnni) {
    // AMX also needs the OS to grant this process the tile state, which only the level asks.
    EXPECT_TRUE(level == "avx512-vnni" || (amx_cpu && level == "avx512-amx")) << level;
  } else {
    EXPECT_EQ(level, avx2 ? "avx2" : "scalar");
  }
  EXPECT_EQ(supported_simd_levels().back(), level);
}

TEST(QuantSimd, selects_each_supported_level_by_name_and_refuses_unknown_ones) {
  SimdOn guard;
  for (auto l : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(l)) << l;
    EXPECT_EQ(simd_level(), l);
    EXPECT_EQ(simd_enabled(), l != "scalar");
  }
  set_simd_enabled(true);
  const auto best = simd_level();
  EXPECT_FALSE(set_simd_level("sse9"));
  EXPECT_EQ(simd_level(), best);
}

TEST(QuantSimd, vec_dot_matches_the_reference_at_every_level_across_sizes_and_misalignments) {
  SimdOn guard;
  for (auto level : simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : testing::weight_types()) {
      const DType at = vec_dot_type(t);
      for (int64_t n : sizes_for(t)) {
        const auto w = random_floats(n, static_cast<uint32_t>(n) * 3 + 1);
        const auto a = random_floats(n, static_cast<uint32_t>(n) * 7 + 2, 2.0f);
        const auto wq = testing::quantized(t, w);
        const auto aq = testing::quantized(at, a);
        const auto wd = testing::dequantized(t, wq.data(), n);
        const auto ad = testing::dequantized(at, aq.data(), n);
        double mag = 0;
        for (int64_t i = 0; i < n; ++i) mag += std::fabs(double(wd[i]) * ad[i]);
        const float want = ref::vec_dot(t, n, wq.data(), aq.data());
        for (size_t k = 0; k < 8; ++k) {
          const size_t off = k * testing::natural_alignment(t);
          Misaligned mw(wq, off), ma(aq, (k * 3) % 8 * testing::natural_alignment(at));
          const float got = vec_dot(t, n, mw.p, ma.p);
          ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30)
              << level << " " << dtype_name(t) << " n=" << n << " offset=" << off;
        }
      }
    }
  }
}

TEST(QuantSimd, activation_quantizers_are_bit_identical_to_the_reference_at_every_level) {
  SimdOn guard;
  for (auto level : simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : {DType::Q8_0, DType::Q8_1, DType::Q8_K, DType::F16, DType::BF16}) {
      const bool q8 = t == DType::Q8_0 || t == DType::Q8_1;
      for (int64_t blocks : {1, 2, 3, 17, 26}) {
        const int64_t n = blocks * (q8 ? 32 : 256);
        auto x = random_floats(n, static_cast<uint32_t>(blocks), 4.0f);
        if (blocks == 26 && q8) {
          // The edges inside whole groups of 8 blocks (the vector levels quantize 8 at once):
          // a zero block (d = 0, 1/d = 0), scales that round to fp16 zero or subnormals, one
          // that overflows fp16 (d = 1e7 / 127), and blocks of exact ties.
          std::fill(x.begin() + 9 * 32, x.begin() + 10 * 32, 0.0f);
          for (int64_t i = 4 * 32; i < 5 * 32; ++i) x[i] *= 1e-6f;
          for (int64_t i = 6 * 32; i < 7 * 32; ++i) x[i] *= 2e-5f;
          for (int64_t i = 5 * 32; i < 6 * 32; ++i) x[i] *= 1e7f;
          for (int64_t i = 16 * 32; i < 24 * 32; ++i) {
            x[i] = i % 32 == 0 ? 127.0f : static_cast<float>(i % 255 - 127) / 2.0f;
          }
        }
        if (blocks == 2) {
          // Exact .5 products: values k/2 with a block maximum of 127 make x * (1/d) land on ties.
          for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 255 - 127) / 2.0f;
          for (int64_t i = 0; i < n; i += 32) x[i] = 127.0f;
        }
        if (blocks == 3) std::fill(x.begin(), x.begin() + std::min<int64_t>(n, 256), 0.0f);
        if (blocks == 17 && t == DType::F16) {
          // Half's edges: ties at its precision (1 + k/2048), subnormals and their ties, the
          // largest finite, overflow (to inf), infinities, NaNs, signed zeros.
          const float edges[] = {1.f + 1.f / 2048,
                                 1.f + 3.f / 2048,
                                 5.9604645e-8f,
                                 2.9802322e-8f,
                                 8.940697e-8f,
                                 6.1035156e-5f,
                                 6.1e-5f,
                                 65504.f,
                                 65519.f,
                                 65520.f,
                                 1e6f,
                                 INFINITY,
                                 -INFINITY,
                                 NAN,
                                 -0.f,
                                 -65520.f,
                                 -2.9802322e-8f,
                                 1.0009765625f};
          for (size_t i = 0; i < std::size(edges); ++i) x[i * 7] = edges[i];
        }
        std::vector<uint8_t> want(row_bytes(t, n)), got(row_bytes(t, n) + 16);
        ref::quantize_row(t, x.data(), want.data(), n);
        for (size_t k : {0, 1, 3}) {
          const size_t off = k * testing::natural_alignment(t);
          quantize_row(t, x.data(), got.data() + off, n);
          ASSERT_EQ(0, std::memcmp(got.data() + off, want.data(), want.size()))
              << level << " " << dtype_name(t) << " n=" << n << " offset=" << off;
        }
      }
    }
  }
}

TEST(QuantSimd, can_be_switched_off_to_run_the_reference) {
  const int64_t n = 512;
  const auto wq = testing::quantized(DType::Q4_K, random_floats(n, 1));
  const auto aq = testing::quantized(DType::Q8_K, random_floats(n, 2));
  set_simd_enabled(false);
  EXPECT_FALSE(simd_enabled());
  const float off = vec_dot(DType::Q4_K, n, wq.data(), aq.data());
  set_simd_enabled(true);
  EXPECT_EQ(off, ref::vec_dot(DType::Q4_K, n, wq.data(), aq.data()));
}

}  // namespace
}  // namespace ember::tensor
