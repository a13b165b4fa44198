// The interleaved weight layout (tensor/interleave.h): the same bytes permuted, every row
// recoverable, and a matmul over it bit for bit the plain matrix's at every SIMD level, through
// the level's own kernel for the layout where it has one and through de-interleaving otherwise.
#include "tensor/interleave.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "tensor/matmul.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::random_floats;
using testing::RestoreBestLevel;

constexpr DType kTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1};

struct Quantized {
  std::vector<uint8_t> plain, interleaved;
  Matrix matrix(int32_t lanes) const {
    return Matrix{type, rows, cols, lanes > 0 ? interleaved.data() : plain.data(), lanes};
  }
  DType type;
  int64_t rows, cols;
};

Quantized make(DType t, int64_t rows, int64_t cols, int32_t lanes, uint32_t seed) {
  Quantized q{{}, {}, t, rows, cols};
  const size_t rb = row_bytes(t, cols);
  q.plain.resize(rb * static_cast<size_t>(rows));
  const auto wf = random_floats(rows * cols, seed);
  for (int64_t r = 0; r < rows; ++r) {
    ref::quantize_row(t, wf.data() + r * cols, q.plain.data() + static_cast<size_t>(r) * rb, cols);
  }
  q.interleaved.assign(q.plain.size(), 0xA5);
  interleave_groups(t, cols, lanes, q.plain.data(), q.interleaved.data(), 0, rows / lanes);
  return q;
}

TEST(Interleave, is_a_permutation_every_row_and_element_of_which_reads_back) {
  for (DType t : kTypes) {
    for (int32_t lanes : {8, 16}) {
      const int64_t rows = 3 * lanes, cols = 7 * block_elems(t);
      const Quantized q = make(t, rows, cols, lanes, 11);
      // The same bits (Q5's fifth-bit words are reordered within themselves).
      const auto ones = [](const std::vector<uint8_t>& v) {
        int64_t n = 0;
        for (uint8_t c : v) n += __builtin_popcount(c);
        return n;
      };
      EXPECT_EQ(ones(q.plain), ones(q.interleaved)) << dtype_name(t) << " lanes=" << lanes;
      if (t != DType::Q5_0 && t != DType::Q5_1) {  // and otherwise the same bytes
        std::vector<uint8_t> a = q.plain, b = q.interleaved;
        std::sort(a.begin(), a.end());
        std::sort(b.begin(), b.end());
        EXPECT_EQ(a, b) << dtype_name(t) << " lanes=" << lanes;
      }
      EXPECT_NE(q.plain, q.interleaved) << dtype_name(t) << " lanes=" << lanes;
      const Matrix w = q.matrix(lanes);
      const size_t rb = row_bytes(t, cols);
      std::vector<uint8_t> all(q.plain.size());
      deinterleave_rows(w, 0, rows, all.data());
      EXPECT_EQ(all, q.plain) << dtype_name(t) << " lanes=" << lanes;
      std::vector<uint8_t> one(rb);
      std::vector<float> got(static_cast<size_t>(cols)), want(got.size());
      for (int64_t r = 0; r < rows; ++r) {
        deinterleave_rows(w, r, 1, one.data());
        ASSERT_EQ(std::memcmp(one.data(), q.plain.data() + static_cast<size_t>(r) * rb, rb), 0)
            << dtype_name(t) << " lanes=" << lanes << " row " << r;
        get_row(w, r, got.data());
        get_row(q.matrix(0), r, want.data());
        ASSERT_EQ(got, want) << dtype_name(t) << " lanes=" << lanes << " get_row " << r;
      }
    }
  }
}

// Block counts with and without a partial group of 8 (the float order's phases), token counts
// that take the single-token, pair and odd paths (and at avx512-amx the tile products' chunks
// of 16, 8 and 4 tokens with a remainder of 3; at avx2 67 takes Q8_0's and the 4-bit types'
// unpacked groups, which they use from 64 tokens), 1 and 3 threads (one matrix large enough to
// be split into several tasks), both interleaves (a level
// reading the other's layout de-interleaves).
TEST(Interleave, a_matmul_over_it_is_the_plain_matrix_result_bit_for_bit_at_every_level) {
  RestoreBestLevel restore;
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : kTypes) {
      for (int32_t lanes : {8, 16}) {
        for (int64_t nb : {2, 8, 18, 19}) {
          const int64_t rows = (nb == 19 ? 64 : 6) * lanes, cols = nb * block_elems(t);
          const Quantized q = make(t, rows, cols, lanes, static_cast<uint32_t>(nb));
          const Matrix plain = q.matrix(0), inter = q.matrix(lanes);
          for (int64_t n_tokens : {1, 2, 3, 5, 17, 31, 67}) {
            const auto x = random_floats(n_tokens * cols, static_cast<uint32_t>(n_tokens), 2.0f);
            for (auto& pool : pools) {
              std::vector<float> want(static_cast<size_t>(rows * n_tokens)), got(want.size(), NAN);
              matmul(plain, x.data(), n_tokens, want.data(), pool);
              matmul(inter, x.data(), n_tokens, got.data(), pool);
              for (size_t k = 0; k < got.size(); ++k) {
                ASSERT_EQ(got[k], want[k])
                    << level << " " << dtype_name(t) << " lanes=" << lanes << " nb=" << nb
                    << " tokens=" << n_tokens << " threads=" << pool.size() << " k=" << k;
              }
            }
          }
        }
      }
    }
  }
}

// matmul prepares the activations for the interleaved kernels once per call, and once for all
// the products of one type in a call: a later call of the same shape with other activations
// reads its own, and products of two types (two activation copies) in one call each read theirs.
TEST(Interleave, each_matmul_call_reads_its_own_activations_in_every_product) {
  RestoreBestLevel restore;
  ThreadPool pool(2);
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : kTypes) {
      const DType other = t == DType::Q8_0 ? DType::Q4_1 : DType::Q8_0;  // another activation type
      const int32_t lanes = active_gemm_kernel(t).interleave_rows;
      if (lanes == 0 || active_gemm_kernel(other).interleave_rows != lanes) continue;
      const int64_t rows = 4 * lanes, cols = 18 * block_elems(t);
      // The fourth runs in the plain layout, whose tasks compute the activation side
      // themselves, on every thread: in scratch apart from the prepared side the others read
      // (one scratch for both would race with them: TSan runs this test).
      const Quantized q[] = {make(t, rows, cols, lanes, 1), make(t, rows, cols, lanes, 2),
                             make(other, rows, cols, lanes, 3), make(t, rows, cols, lanes, 4)};
      for (int64_t n_tokens : {1, 3, 8}) {
        // Seeds 7 and 8: one product, twice the same call but for the activations; 9 and 10:
        // all four products in one call.
        for (uint32_t seed : {7u, 8u, 9u, 10u}) {
          const int np = seed < 9 ? 1 : 4;
          const auto x = random_floats(n_tokens * cols, seed, 2.0f);
          const size_t n = static_cast<size_t>(rows * n_tokens);
          std::vector<float> got[4], want[4];
          MatmulOut outs[4];
          Matrix mats[4];
          for (int i = 0; i < np; ++i) {
            got[i].assign(n, NAN);
            want[i].assign(n, NAN);
            mats[i] = q[i].matrix(i < 3 ? lanes : 0);
            outs[i] = {&mats[i], got[i].data()};
            matmul(q[i].matrix(0), x.data(), n_tokens, want[i].data(), pool);
          }
          matmul(std::span<const MatmulOut>(outs, static_cast<size_t>(np)), x.data(), n_tokens,
                 pool);
          for (int i = 0; i < np; ++i) {
            EXPECT_EQ(got[i], want[i]) << level << " " << dtype_name(t) << " product " << i
                                       << " tokens=" << n_tokens << " seed=" << seed;
          }
        }
      }
    }
  }
}

// The levels that have a kernel for the layout ask for it (so the test above ran it, not only
// the de-interleaving fallback), and only for whole groups.
TEST(Interleave, the_best_level_asks_for_the_layout_its_kernel_reads) {
  RestoreBestLevel restore;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : kTypes) {
      const simd::GemmKernel g = active_gemm_kernel(t);
      const int32_t want = g.interleaved_run != nullptr ? g.interleave_rows : 0;
      EXPECT_EQ(preferred_interleave(t, 64, 512), want) << level << " " << dtype_name(t);
      EXPECT_EQ(preferred_interleave(t, 64 + 4, 512), 0) << level << " " << dtype_name(t);
      if (level == "avx512-vnni" || level == "avx512-amx") {
        EXPECT_EQ(want, 16) << dtype_name(t);
      }
      if (g.interleaved_run == nullptr) continue;
      // The kernel itself, called as matmul calls it for a task of two groups.
      const int64_t cols = 18 * block_elems(t), rows = 2 * g.interleave_rows, n_tokens = 3;
      const Quantized q = make(t, rows, cols, g.interleave_rows, 5);
      const auto x = random_floats(n_tokens * cols, 6, 2.0f);
      const DType at = vec_dot_type(t);
      const size_t arb = row_bytes(at, cols);
      std::vector<uint8_t> xq(arb * n_tokens);
      for (int64_t k = 0; k < n_tokens; ++k) quantize_row(at, &x[k * cols], &xq[k * arb], cols);
      ThreadPool pool(1);
      std::vector<float> want_y(static_cast<size_t>(rows * n_tokens)), got(want_y.size(), NAN);
      matmul(q.matrix(0), x.data(), n_tokens, want_y.data(), pool);
      ASSERT_NE(g.interleaved_prepare, nullptr) << level << " " << dtype_name(t);
      const void* prep = g.interleaved_prepare(cols, xq.data(), arb, n_tokens);
      g.interleaved_run(cols, q.interleaved.data(), rows, xq.data(), arb, n_tokens, prep,
                        got.data(), static_cast<size_t>(rows));
      EXPECT_EQ(got, want_y) << level << " " << dtype_name(t);
    }
    EXPECT_EQ(preferred_interleave(DType::Q4_K, 64, 512), 0) << level;
  }
}

}  // namespace
}  // namespace ember::tensor
