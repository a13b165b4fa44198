// The batched (GEMM-tiled) matmul against per-row reference dot products, at every SIMD level,
// for tile edges (row and token counts that are not multiples of the tile) and misaligned data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/interleave.h"
#include "tensor/matmul.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor_test_util.h"

namespace ember::tensor {
namespace {

using testing::random_floats;
using testing::RestoreBestLevel;

int64_t cols_for(DType t) {
  if (block_elems(t) == 1) return 45;  // 5 vectors of 8 and a tail of 5
  return 3 * block_elems(t);
}

// y[t][r] must equal ref::vec_dot(W row r, quantized x row t) up to float summation order.
void expect_matmul_equals_reference_dots(DType t, int64_t rows, int64_t n_tokens, size_t offset,
                                         ThreadPool& pool, int64_t cols = 0) {
  if (cols == 0) cols = cols_for(t);
  const DType at = vec_dot_type(t);
  const size_t wrb = row_bytes(t, cols), arb = row_bytes(at, cols);
  std::vector<uint8_t> storage(wrb * static_cast<size_t>(rows) + 64 + offset);
  auto base = reinterpret_cast<uintptr_t>(storage.data());
  uint8_t* wq = storage.data() + ((64 - base % 64) % 64) + offset;
  const auto wf = random_floats(rows * cols, static_cast<uint32_t>(rows * 31 + offset));
  for (int64_t r = 0; r < rows; ++r) ref::quantize_row(t, wf.data() + r * cols, wq + r * wrb, cols);
  const auto x = random_floats(n_tokens * cols, static_cast<uint32_t>(n_tokens * 17 + 3), 2.0f);
  std::vector<uint8_t> xq(arb * static_cast<size_t>(n_tokens));
  for (int64_t k = 0; k < n_tokens; ++k) {
    ref::quantize_row(at, x.data() + k * cols, xq.data() + k * arb, cols);
  }
  std::vector<float> y(static_cast<size_t>(rows * n_tokens), NAN);
  matmul(Matrix{t, rows, cols, wq}, x.data(), n_tokens, y.data(), pool);

  std::vector<float> wd(static_cast<size_t>(cols)), xd(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    ref::dequantize_row(t, wq + r * wrb, wd.data(), cols);
    for (int64_t k = 0; k < n_tokens; ++k) {
      ref::dequantize_row(at, xq.data() + k * arb, xd.data(), cols);
      double mag = 0;
      for (int64_t c = 0; c < cols; ++c) mag += std::fabs(double(wd[c]) * xd[c]);
      const float want = ref::vec_dot(t, cols, wq + r * wrb, xq.data() + k * arb);
      ASSERT_NEAR(y[k * rows + r], want, 1e-5 * mag + 1e-30)
          << simd_level() << " " << dtype_name(t) << " rows=" << rows << " tokens=" << n_tokens
          << " offset=" << offset << " r=" << r << " t=" << k;
    }
  }
}

TEST(Gemm, matmul_equals_per_row_reference_dots_at_every_level_type_and_tile_edge) {
  RestoreBestLevel restore;
  ThreadPool pool(2);
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : testing::weight_types()) {
      for (int64_t rows : {1, 3, 4, 5, 8, 13}) {
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 7, 9}) {
          expect_matmul_equals_reference_dots(t, rows, n_tokens, 0, pool);
        }
      }
    }
  }
}

// The types with a packed prefill path at some level (AVX2: Q4_0, Q5_0, Q4_1, Q5_1, Q4_K, Q5_K,
// Q6_K; AVX-512 VNNI: those and Q8_0).
const std::vector<DType>& packed_types() {
  static const std::vector<DType> v = {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1,
                                       DType::Q5_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  return v;
}

// A level stacks on the one below it, and its tiles replace the lower level's: a type that had a
// packed prefill path below must keep one (AVX-512 hosts once lost AVX2's Q4_1, Q5_1 and Q5_K
// packed paths this way, so SmolLM2's prefill ran on the plain tiles there).
TEST(Gemm, a_higher_simd_level_keeps_every_packed_prefill_path_of_the_level_below) {
  RestoreBestLevel restore;
  std::vector<DType> below;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    std::vector<DType> here;
    for (DType t : testing::weight_types()) {
      if (active_gemm_kernel(t).has_packed()) here.push_back(t);
    }
    for (DType t : below) {
      EXPECT_NE(std::find(here.begin(), here.end(), t), here.end())
          << level << " has no packed path for " << dtype_name(t) << " (the level below has one)";
    }
    below = here;
  }
}

// Prefill-sized calls take the packed path where a level has one (rows packed once in blocks,
// two tokens per wide vector): even and odd block counts, a partial last row block, token
// counts that leave 0, 1, 2 and 3 tokens after the groups of four.
TEST(Gemm, many_token_matmul_equals_reference_dots_for_even_and_odd_block_counts) {
  RestoreBestLevel restore;
  ThreadPool pool(2);
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : packed_types()) {
      for (int64_t blocks : {1, 2, 5, 20}) {
        expect_matmul_equals_reference_dots(t, 37, 11, 0, pool, blocks * block_elems(t));
      }
      for (int64_t n_tokens : {4, 5, 6, 8}) {
        expect_matmul_equals_reference_dots(t, 13, n_tokens, 0, pool, 2 * block_elems(t));
      }
    }
  }
}

// Prefill and decode must not drift apart: a token's outputs from a many-token call equal, bit
// for bit, those of a call with that token alone (the real model amplifies a last-bit change
// in one activation; see the parity tests).
TEST(Gemm, many_token_matmul_is_bit_identical_to_single_token_matmuls) {
  ThreadPool pool(2);
  const int64_t rows = 21;  // a partial last row block
  for (DType t : packed_types()) {
    const int64_t cols = block_elems(t) > 32 ? 1024 : 640;  // K types: 4 super-blocks
    std::vector<uint8_t> wq(row_bytes(t, cols) * rows);
    const auto wf = random_floats(rows * cols, 9);
    for (int64_t r = 0; r < rows; ++r) {
      ref::quantize_row(t, wf.data() + r * cols, wq.data() + r * row_bytes(t, cols), cols);
    }
    // 0, 1, 2 and 3 tokens left after the groups of four, and several groups.
    for (int64_t n_tokens : {4, 5, 6, 7, 11}) {
      const auto x = random_floats(n_tokens * cols, 10);
      std::vector<float> all(rows * n_tokens), one(rows);
      matmul(Matrix{t, rows, cols, wq.data()}, x.data(), n_tokens, all.data(), pool);
      for (int64_t k = 0; k < n_tokens; ++k) {
        matmul(Matrix{t, rows, cols, wq.data()}, x.data() + k * cols, 1, one.data(), pool);
        for (int64_t r = 0; r < rows; ++r) {
          ASSERT_EQ(all[k * rows + r], one[r])
              << dtype_name(t) << " tokens=" << n_tokens << " t=" << k << " r=" << r;
        }
      }
    }
  }
}

// Batch invariance at every level and for every weight type: a token's outputs do not depend on
// how many tokens share the call (decode vs prefill tiles, tile edges) and equal, bit for bit,
// vec_dot of the weight row with that token's quantized activation. The prefix cache promises
// the same output with and without a hit, which needs exactly this.
TEST(Gemm, every_token_count_gives_each_token_the_single_token_result_bit_for_bit) {
  RestoreBestLevel restore;
  ThreadPool pool(2);
  const int64_t rows = 13;  // partial row tiles for every tile height
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : testing::weight_types()) {
      const int64_t cols = block_elems(t) == 1 ? 517 : 512;  // float types: a tail of 5
      const DType at = vec_dot_type(t);
      const size_t wrb = row_bytes(t, cols), arb = row_bytes(at, cols);
      std::vector<uint8_t> wq(wrb * rows), xq(arb);
      const auto wf = random_floats(rows * cols, 21);
      for (int64_t r = 0; r < rows; ++r) {
        ref::quantize_row(t, wf.data() + r * cols, wq.data() + r * wrb, cols);
      }
      const Matrix m{t, rows, cols, wq.data()};
      for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 17}) {
        const auto x = random_floats(n_tokens * cols, static_cast<uint32_t>(n_tokens), 2.0f);
        std::vector<float> all(rows * n_tokens), one(rows);
        matmul(m, x.data(), n_tokens, all.data(), pool);
        for (int64_t k = 0; k < n_tokens; ++k) {
          matmul(m, x.data() + k * cols, 1, one.data(), pool);
          quantize_row(at, x.data() + k * cols, xq.data(), cols);
          for (int64_t r = 0; r < rows; ++r) {
            const float dot = vec_dot(t, cols, wq.data() + r * wrb, xq.data());
            ASSERT_EQ(all[k * rows + r], one[r])
                << level << " " << dtype_name(t) << " tokens=" << n_tokens << " t=" << k
                << " r=" << r;
            ASSERT_EQ(one[r], dot)
                << level << " " << dtype_name(t) << " vec_dot t=" << k << " r=" << r;
          }
        }
      }
    }
  }
}

// Every level's tile entry itself, for every tile shape it accepts: matmul sends some types'
// calls elsewhere (the legacy types: one token to the row path, two or more to the packed path), so
// the tiles get called directly here, against vec_dot bit for bit.
TEST(Gemm, every_tile_shape_gives_vec_dot_bit_for_bit_at_every_level) {
  RestoreBestLevel restore;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : testing::weight_types()) {
      const simd::GemmKernel g = active_gemm_kernel(t);
      if (g.tile == nullptr) continue;
      const int64_t cols = block_elems(t) == 1 ? 517 : 512;
      const DType at = vec_dot_type(t);
      const size_t wrb = row_bytes(t, cols), arb = row_bytes(at, cols);
      const int rows = g.max_rows, toks = g.max_tokens;
      std::vector<uint8_t> wq(wrb * rows), xq(arb * toks);
      const auto wf = random_floats(rows * cols, 31);
      const auto xf = random_floats(toks * cols, 32, 2.0f);
      for (int r = 0; r < rows; ++r) ref::quantize_row(t, &wf[r * cols], &wq[r * wrb], cols);
      for (int k = 0; k < toks; ++k) quantize_row(at, &xf[k * cols], &xq[k * arb], cols);
      for (int nr = 1; nr <= rows; ++nr) {
        for (int nt = 1; nt <= toks; ++nt) {
          std::vector<float> y(static_cast<size_t>(nt * nr), NAN);
          g.tile(cols, wq.data(), wrb, nr, xq.data(), arb, nt, y.data(), static_cast<size_t>(nr));
          for (int k = 0; k < nt; ++k) {
            for (int r = 0; r < nr; ++r) {
              ASSERT_EQ(y[k * nr + r], vec_dot(t, cols, &wq[r * wrb], &xq[k * arb]))
                  << level << " " << dtype_name(t) << " tile " << nr << "x" << nt << " r=" << r
                  << " t=" << k;
            }
          }
        }
      }
    }
  }
}

// Misaligned for vectors (not 32/64-byte aligned), naturally aligned for elements, as GGUF rows
// are.
TEST(Gemm, matmul_reads_vector_misaligned_weights_correctly_at_every_level) {
  RestoreBestLevel restore;
  ThreadPool pool(1);
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (DType t : testing::weight_types()) {
      for (size_t k : {1, 3, 7}) {
        expect_matmul_equals_reference_dots(t, 5, 6, k * testing::natural_alignment(t), pool);
      }
    }
  }
}

// The fused form (a layer's q, k, v; its gate and up): each output is bit for bit what its own
// matmul gives, with matrices of different types (so different activation types: Q8_0, Q8_K,
// F16) and sizes in one job, at every level, token count and pool size, and the pool gets one
// hand-off for all of them (plus one per activation type for the parallel quantization of
// 4 tokens or more).
TEST(Gemm, a_fused_matmul_gives_each_matrix_its_own_result_bit_for_bit_in_one_hand_off) {
  RestoreBestLevel restore;
  const int64_t cols = 512;
  struct Spec {
    DType type;
    int64_t rows;
  };
  const Spec specs[] = {{DType::Q5_0, 37}, {DType::Q8_0, 300}, {DType::Q4_K, 9}, {DType::F16, 5}};
  static_assert(std::size(specs) == kMaxMatmulOuts);
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<Matrix> ms;
  for (const Spec& s : specs) {
    const size_t wrb = row_bytes(s.type, cols);
    bytes.emplace_back(wrb * static_cast<size_t>(s.rows));
    const auto wf = random_floats(s.rows * cols, static_cast<uint32_t>(s.rows));
    for (int64_t r = 0; r < s.rows; ++r) {
      ref::quantize_row(s.type, wf.data() + r * cols, bytes.back().data() + r * wrb, cols);
    }
  }
  for (size_t i = 0; i < std::size(specs); ++i) {
    ms.push_back(Matrix{specs[i].type, specs[i].rows, cols, bytes[i].data()});
  }
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(3)};
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (int64_t n_tokens : {1, 3, 4, 8, 17}) {
      const auto x = random_floats(n_tokens * cols, static_cast<uint32_t>(n_tokens), 2.0f);
      for (auto& pool : pools) {
        std::vector<std::vector<float>> want, got;
        std::vector<MatmulOut> outs;
        for (const Matrix& m : ms) {
          want.emplace_back(static_cast<size_t>(m.rows * n_tokens));
          got.emplace_back(want.back().size(), NAN);
          matmul(m, x.data(), n_tokens, want.back().data(), pool);
        }
        for (size_t i = 0; i < ms.size(); ++i) outs.push_back({&ms[i], got[i].data()});
        const int64_t jobs_before = pool.jobs();
        matmul(outs, x.data(), n_tokens, pool);
        if (pool.size() > 1) {
          const int64_t quant_jobs = n_tokens >= 4 ? 3 : 0;  // Q8_0 (Q5_0 and Q8_0), Q8_K, F16
          EXPECT_EQ(pool.jobs() - jobs_before, 1 + quant_jobs) << level << " tokens=" << n_tokens;
        }
        for (size_t i = 0; i < ms.size(); ++i) {
          for (size_t k = 0; k < got[i].size(); ++k) {
            ASSERT_EQ(got[i][k], want[i][k])
                << level << " " << dtype_name(ms[i].type) << " tokens=" << n_tokens
                << " threads=" << pool.size() << " k=" << k;
          }
        }
      }
    }
  }
}

// The fused form with a rows function (a layer's gate and up, then its activation): the
// function sees each range of rows only once both products hold it for every token, the ranges
// cover every row once and start at multiples of kRowsAlign, and the products are bit for bit
// their own matmuls. Matrices of one type and layout take one hand-off for all of it; a pair
// whose kernels cut rows differently (one matrix interleaved, the other not, at the scalar level)
// takes a second one for the ranges, and that path is checked the same way.
TEST(Gemm, a_fused_matmul_runs_the_rows_function_on_rows_both_products_hold) {
  RestoreBestLevel restore;
  const int64_t cols = 512, rows = 496;  // 31 interleave groups of 16; over 64 KB, so split
  struct Pair {
    DType gate, up;
    int32_t gate_lanes, up_lanes;  // -1: the level's preferred layout
  };
  const Pair pairs[] = {{DType::Q4_1, DType::Q4_1, 0, 0},   {DType::Q4_1, DType::Q4_1, -1, -1},
                        {DType::Q5_0, DType::Q5_0, -1, -1}, {DType::Q4_K, DType::Q4_K, 0, 0},
                        {DType::Q8_0, DType::Q4_K, 0, 0},   {DType::Q4_1, DType::Q4_1, 16, 0}};
  bool second_hand_off = false;
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (const Pair& pair : pairs) {
      std::vector<std::vector<uint8_t>> bytes;
      std::vector<Matrix> ms;
      for (const auto& [t, want_lanes] :
           {std::pair(pair.gate, pair.gate_lanes), std::pair(pair.up, pair.up_lanes)}) {
        const size_t wrb = row_bytes(t, cols);
        std::vector<uint8_t> plain(wrb * static_cast<size_t>(rows));
        const auto wf = random_floats(rows * cols, static_cast<uint32_t>(ms.size() + 40));
        for (int64_t r = 0; r < rows; ++r) {
          ref::quantize_row(t, wf.data() + r * cols, plain.data() + r * wrb, cols);
        }
        const int32_t lanes = want_lanes >= 0 ? want_lanes : preferred_interleave(t, rows, cols);
        if (lanes > 0) {
          std::vector<uint8_t> inter(plain.size());
          interleave_matrix(t, rows, cols, lanes, plain.data(), inter.data(), false);
          plain.swap(inter);
        }
        bytes.push_back(std::move(plain));
        ms.push_back(Matrix{t, rows, cols, bytes.back().data(), lanes});
      }
      for (int64_t n_tokens : {1, 3, 17}) {
        const auto x = random_floats(n_tokens * cols, static_cast<uint32_t>(n_tokens), 2.0f);
        for (auto& pool : pools) {
          const std::string where =
              std::string(level) + " " + std::string(dtype_name(pair.gate)) + "/" +
              std::string(dtype_name(pair.up)) + " lanes " + std::to_string(ms[0].interleave) +
              "/" + std::to_string(ms[1].interleave) + " tokens=" + std::to_string(n_tokens) +
              " threads=" + std::to_string(pool.size());
          const size_t n = static_cast<size_t>(rows * n_tokens);
          std::vector<float> want_g(n), want_u(n), got_g(n, NAN), got_u(n, NAN);
          matmul(ms[0], x.data(), n_tokens, want_g.data(), pool);
          matmul(ms[1], x.data(), n_tokens, want_u.data(), pool);
          std::mutex mu;
          std::vector<int> seen(static_cast<size_t>(rows), 0);
          bool ready = true, aligned = true;
          const MatmulOut outs[] = {{&ms[0], got_g.data()}, {&ms[1], got_u.data()}};
          const int64_t jobs_before = pool.jobs();
          matmul(outs, x.data(), n_tokens, pool, [&](int64_t r0, int64_t r1) {
            std::lock_guard lk(mu);
            aligned = aligned && r0 % kRowsAlign == 0 && r0 < r1 && r1 <= rows;
            for (int64_t t = 0; t < n_tokens; ++t) {
              for (int64_t r = r0; r < r1; ++r) {
                const size_t i = static_cast<size_t>(t * rows + r);
                ready = ready && !std::isnan(got_g[i]) && !std::isnan(got_u[i]);
                got_g[i] -= got_u[i];  // the element-wise step: gate - up, in place
              }
            }
            for (int64_t r = r0; r < r1; ++r) ++seen[static_cast<size_t>(r)];
          });
          EXPECT_TRUE(ready) << where;
          EXPECT_TRUE(aligned) << where;
          EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), rows) << where;
          if (pool.size() > 1) {
            // plus one per activation type for the parallel quantization of 4 tokens or more
            const int64_t quant_jobs = n_tokens >= 4 ? (pair.gate == pair.up ? 1 : 2) : 0;
            const int64_t jobs = pool.jobs() - jobs_before - quant_jobs;
            if (ms[0].interleave == ms[1].interleave && pair.gate == pair.up) {
              EXPECT_EQ(jobs, 1) << where;
            } else {
              EXPECT_LE(jobs, 2) << where;
              second_hand_off = second_hand_off || jobs == 2;
            }
          }
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(got_u[i], want_u[i]) << where << " i=" << i;
            ASSERT_EQ(got_g[i], want_g[i] - want_u[i]) << where << " i=" << i;
          }
        }
      }
    }
  }
  EXPECT_TRUE(second_hand_off);
}

TEST(Gemm, every_level_gives_the_same_matmul_up_to_rounding) {
  RestoreBestLevel restore;
  ThreadPool pool(2);
  const int64_t rows = 9, cols = 512, n_tokens = 6;
  for (DType t : {DType::Q8_0, DType::Q5_0, DType::Q4_K, DType::Q6_K, DType::F32, DType::F16}) {
    std::vector<uint8_t> wq(row_bytes(t, cols) * rows);
    const auto wf = random_floats(rows * cols, 4);
    for (int64_t r = 0; r < rows; ++r) {
      ref::quantize_row(t, wf.data() + r * cols, wq.data() + r * row_bytes(t, cols), cols);
    }
    const auto x = random_floats(n_tokens * cols, 5);
    std::vector<float> want(rows * n_tokens);
    set_simd_enabled(false);
    matmul(Matrix{t, rows, cols, wq.data()}, x.data(), n_tokens, want.data(), pool);
    for (auto level : supported_simd_levels()) {
      ASSERT_TRUE(set_simd_level(level));
      std::vector<float> got(want.size());
      matmul(Matrix{t, rows, cols, wq.data()}, x.data(), n_tokens, got.data(), pool);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i])))
            << level << " " << dtype_name(t) << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace ember::tensor
