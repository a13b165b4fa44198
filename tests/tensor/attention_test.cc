// The attention and GELU kernels at every SIMD level against their scalar twins (ref::), the
// block-list (segmented) attention against the contiguous form bit for bit, and the dispatch:
// set_simd_level reaches them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/exp_avx2.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"

namespace ember::tensor {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Restores the best level when a test ends, whatever it selected.
class LevelGuard {
 public:
  ~LevelGuard() { set_simd_enabled(true); }
};

// Queries of a group, keys/values strided as in a multi-head cache (head 1 of 2).
void expect_group_equals_per_query(int32_t nq, int32_t n, int32_t hd) {
  const int64_t kv_stride = 2 * hd, q_stride = hd + 8, out_stride = hd + 4;
  const auto q = random_floats(static_cast<size_t>(nq * q_stride), 1 + nq, 1.f);
  const auto kv = random_floats(static_cast<size_t>(n * kv_stride), 2 + n, 1.f);
  const auto vv = random_floats(static_cast<size_t>(n * kv_stride), 3 + n, 1.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scores(static_cast<size_t>(nq * n));
  std::vector<float> got(static_cast<size_t>(nq * out_stride), NAN);
  attend_group(q.data(), q_stride, nq, kv.data() + hd, vv.data() + hd, kv_stride, n, hd, scale,
               scores.data(), got.data(), out_stride);
  std::vector<float> want(static_cast<size_t>(hd));
  for (int32_t g = 0; g < nq; ++g) {
    ref::attend_one(q.data() + g * q_stride, kv.data() + hd, vv.data() + hd, kv_stride, n, hd,
                    scale, scores.data(), want.data());
    for (int32_t d = 0; d < hd; ++d) {
      ASSERT_NEAR(got[g * out_stride + d], want[d], 1e-5f)
          << simd_level() << " nq=" << nq << " n=" << n << " hd=" << hd << " g=" << g << " d=" << d;
    }
  }
}

TEST(Attention, grouped_queries_equal_the_per_query_reference_at_every_level) {
  LevelGuard guard;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (int32_t nq : {1, 2, 3, 4, 5, 8}) {
      for (int32_t n : {1, 2, 3, 17, 224}) {
        expect_group_equals_per_query(nq, n, 256);
        expect_group_equals_per_query(nq, n, 64);
      }
    }
    // head sizes without a vector path fall back to the reference
    expect_group_equals_per_query(4, 9, 24);
    expect_group_equals_per_query(2, 5, 7);
  }
}

// The runs [begin, end) that positions [0, n) fall into when cut at `cuts` (ascending; empty
// runs skipped): how a test lays KV out in blocks.
std::vector<std::pair<int32_t, int32_t>> runs(const std::vector<int32_t>& cuts, int32_t n) {
  std::vector<std::pair<int32_t, int32_t>> out;
  int32_t at = 0;
  std::vector<int32_t> ends = cuts;
  ends.push_back(n);
  for (int32_t end : ends) {
    if (end <= at) continue;
    out.emplace_back(at, end);
    at = end;
  }
  return out;
}

// KV held in blocks: the same positions cut into segments anywhere give the same bits as one
// contiguous run, at the active level and in the scalar twin (the prefix cache reuses blocks, so
// this is what makes a hit bit-identical). The active level also matches the scalar twin.
void expect_segments_equal_contiguous(int32_t nq, int32_t n, int32_t hd,
                                      const std::vector<int32_t>& cuts) {
  const int64_t kv_stride = 2 * hd;
  const auto q = random_floats(static_cast<size_t>(nq * hd), 11 + nq, 1.f);
  const auto kv = random_floats(static_cast<size_t>(n * kv_stride), 12 + n, 1.f);
  const auto vv = random_floats(static_cast<size_t>(n * kv_stride), 13 + n, 1.f);
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  // Segments live in separate buffers, as blocks do.
  std::vector<std::vector<float>> ks, vs;
  std::vector<KvSegment> segs;
  for (const auto& [at, end] : runs(cuts, n)) {
    ks.emplace_back(kv.begin() + at * kv_stride, kv.begin() + end * kv_stride);
    vs.emplace_back(vv.begin() + at * kv_stride, vv.begin() + end * kv_stride);
    segs.push_back({ks.back().data(), vs.back().data(), end - at});
  }
  const int32_t n_segs = static_cast<int32_t>(segs.size());
  std::vector<float> scores(static_cast<size_t>(nq * n));
  std::vector<float> want(static_cast<size_t>(nq * hd)), got(want.size(), NAN);
  attend_group(q.data(), hd, nq, kv.data(), vv.data(), kv_stride, n, hd, scale, scores.data(),
               want.data(), hd);
  attend_group_segments(q.data(), hd, nq, segs.data(), n_segs, kv_stride, n, hd, scale,
                        scores.data(), got.data(), hd);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << simd_level() << " nq=" << nq << " n=" << n << " hd=" << hd
                               << " i=" << i;
  }
  std::vector<float> ref_want(want.size()), ref_got(want.size(), NAN);
  ref::attend_group(q.data(), hd, nq, kv.data(), vv.data(), kv_stride, n, hd, scale, scores.data(),
                    ref_want.data(), hd);
  ref::attend_group_segments(q.data(), hd, nq, segs.data(), n_segs, kv_stride, n, hd, scale,
                             scores.data(), ref_got.data(), hd);
  EXPECT_EQ(ref_got, ref_want) << "nq=" << nq << " n=" << n << " hd=" << hd;
  std::vector<float> one(static_cast<size_t>(hd)), one_seg(one.size(), NAN);
  ref::attend_one(q.data(), kv.data(), vv.data(), kv_stride, n, hd, scale, scores.data(),
                  one.data());
  ref::attend_one_segments(q.data(), segs.data(), n_segs, kv_stride, n, hd, scale, scores.data(),
                           one_seg.data());
  EXPECT_EQ(one, one_seg);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], ref_want[i], 1e-5f)
        << simd_level() << " nq=" << nq << " n=" << n << " hd=" << hd << " i=" << i;
  }
}

TEST(Attention, segmented_kv_is_bit_identical_to_contiguous_at_every_level) {
  LevelGuard guard;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (int32_t hd : {64, 256, 24}) {
      for (int32_t nq : {1, 3, 4, 8}) {
        expect_segments_equal_contiguous(nq, 1, hd, {});
        expect_segments_equal_contiguous(nq, 37, hd, {16, 32});
        expect_segments_equal_contiguous(nq, 37, hd, {1, 2, 3, 17, 18});
        expect_segments_equal_contiguous(nq, 100, hd, {5, 21, 37, 53, 69, 85});
      }
    }
  }
}

// The softmax's vector exp against std::exp over the range scores minus their maximum take.
TEST(Attention, the_vector_exp_is_within_2e_7_of_std_exp_over_minus_87_to_0) {
  if (!simd::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<float> x, y;
  for (int i = 0; i < 87 * 4096; ++i) x.push_back(-static_cast<float>(i) / 4096.f);
  x.resize(x.size() / 8 * 8);
  y.resize(x.size());
  simd::exp_nonpositive_n(x.data(), y.data(), static_cast<int>(x.size()));
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    worst = std::max(worst, std::fabs(y[i] - want) / want);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(y[0], 1.f) << "e^0";
}

// The backend hands a group's queries out in slices when a step has few (token, KV head) pairs
// (cpu_model.cc): each query's result must be the same bits whichever queries share its call.
TEST(Attention, a_query_gets_the_same_bits_in_any_group_at_every_level) {
  LevelGuard guard;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (int32_t hd : {64, 256}) {
      for (int32_t n : {1, 13, 100}) {
        const int32_t nq = 8;
        const auto q = random_floats(static_cast<size_t>(nq * hd), 31 + n, 1.f);
        const auto k = random_floats(static_cast<size_t>(n * hd), 32 + n, 1.f);
        const auto v = random_floats(static_cast<size_t>(n * hd), 33 + n, 1.f);
        const float scale = 1.f / std::sqrt(static_cast<float>(hd));
        std::vector<float> scores(static_cast<size_t>(nq * n));
        std::vector<float> all(static_cast<size_t>(nq * hd));
        attend_group(q.data(), hd, nq, k.data(), v.data(), hd, n, hd, scale, scores.data(),
                     all.data(), hd);
        for (int32_t size : {1, 2, 3, 4, 5}) {
          std::vector<float> parts(all.size(), NAN);
          for (int32_t g = 0; g < nq; g += size) {
            const int32_t m = std::min(size, nq - g);
            attend_group(q.data() + g * hd, hd, m, k.data(), v.data(), hd, n, hd, scale,
                         scores.data(), parts.data() + g * hd, hd);
          }
          ASSERT_EQ(parts, all) << level << " hd=" << hd << " n=" << n << " slices of " << size;
        }
      }
    }
  }
}

// A half KV cache: at every level (and in the scalar twin) attention over f16 K/V is bit for bit
// attention over f32 K/V holding the same values widened, whatever the segmentation; the
// levels agree with the scalar twin as the f32 forms do.
void expect_f16_equals_f32_of_widened(int32_t nq, int32_t n, int32_t hd,
                                      const std::vector<int32_t>& cuts) {
  const int64_t kv_stride = 2 * hd;  // head 1 of 2
  const auto q = random_floats(static_cast<size_t>(nq * hd), 21 + nq, 1.f);
  const auto kf = random_floats(static_cast<size_t>(n * kv_stride), 22 + n, 2.f);
  const auto vf = random_floats(static_cast<size_t>(n * kv_stride), 23 + n, 2.f);
  std::vector<uint16_t> kh(kf.size()), vh(vf.size());
  std::vector<float> kw(kf.size()), vw(vf.size());  // the half values widened
  for (size_t i = 0; i < kf.size(); ++i) {
    kh[i] = f32_to_fp16(kf[i]);
    vh[i] = f32_to_fp16(vf[i]);
    kw[i] = fp16_to_f32(kh[i]);
    vw[i] = fp16_to_f32(vh[i]);
  }
  std::vector<KvSegment> s32;
  std::vector<KvSegmentF16> s16;
  for (const auto& [at, end] : runs(cuts, n)) {
    const size_t o = static_cast<size_t>(at * kv_stride + hd);
    s32.push_back({kw.data() + o, vw.data() + o, end - at});
    s16.push_back({kh.data() + o, vh.data() + o, end - at});
  }
  const int32_t ns = static_cast<int32_t>(s32.size());
  const float scale = 1.f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scores(static_cast<size_t>(nq * n));
  std::vector<float> want(static_cast<size_t>(nq * hd)), got(want.size(), NAN);
  attend_group_segments(q.data(), hd, nq, s32.data(), ns, kv_stride, n, hd, scale, scores.data(),
                        want.data(), hd);
  attend_group_segments(q.data(), hd, nq, s16.data(), ns, kv_stride, n, hd, scale, scores.data(),
                        got.data(), hd);
  ASSERT_EQ(got, want) << simd_level() << " nq=" << nq << " n=" << n << " hd=" << hd;
  std::vector<float> ref32(want.size()), ref16(want.size(), NAN);
  ref::attend_group_segments(q.data(), hd, nq, s32.data(), ns, kv_stride, n, hd, scale,
                             scores.data(), ref32.data(), hd);
  ref::attend_group_segments(q.data(), hd, nq, s16.data(), ns, kv_stride, n, hd, scale,
                             scores.data(), ref16.data(), hd);
  ASSERT_EQ(ref16, ref32) << "nq=" << nq << " n=" << n << " hd=" << hd;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], ref16[i], 1e-5f)
        << simd_level() << " nq=" << nq << " n=" << n << " hd=" << hd << " i=" << i;
  }
}

TEST(Attention, half_kv_is_bit_identical_to_f32_kv_of_the_widened_values_at_every_level) {
  LevelGuard guard;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (int32_t hd : {64, 256, 24}) {
      for (int32_t nq : {1, 3, 4, 8}) {
        expect_f16_equals_f32_of_widened(nq, 1, hd, {});
        expect_f16_equals_f32_of_widened(nq, 37, hd, {16, 32});
        expect_f16_equals_f32_of_widened(nq, 100, hd, {5, 21, 37, 53, 69, 85});
      }
    }
  }
}

// The backend reads long ranges in chunks and merges the chunks' results (cpu_model.cc):
// each part's stats are its largest scaled score and its sum of exponentials, and the parts
// merged in order give the attention over the whole range, at every level.
TEST(Attention, parts_merged_by_their_stats_equal_attention_over_the_whole_range_at_every_level) {
  LevelGuard guard;
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    for (int32_t hd : {64, 256, 24}) {
      for (int32_t nq : {1, 3, 4}) {
        for (const std::vector<int32_t>& cuts :
             {std::vector<int32_t>{256, 512}, std::vector<int32_t>{1, 300}}) {
          const int32_t n = 700;
          const auto q = random_floats(static_cast<size_t>(nq * hd), 41 + nq, 1.f);
          // Scores spread over a few units, so parts' maxima differ and the rescaling matters.
          const auto k = random_floats(static_cast<size_t>(n * hd), 42 + hd, 3.f);
          const auto v = random_floats(static_cast<size_t>(n * hd), 43 + hd, 1.f);
          const float scale = 1.f / std::sqrt(static_cast<float>(hd));
          std::vector<float> scores(static_cast<size_t>(nq * n));
          std::vector<float> want(static_cast<size_t>(nq * hd));
          ref::attend_group(q.data(), hd, nq, k.data(), v.data(), hd, n, hd, scale, scores.data(),
                            want.data(), hd);
          const auto parts_of = runs(cuts, n);
          const int32_t np = static_cast<int32_t>(parts_of.size());
          // [part][query][hd] and [part][query][2], as the backend lays them out.
          std::vector<float> parts(static_cast<size_t>(np * nq * hd));
          std::vector<float> stats(static_cast<size_t>(np * nq * 2), NAN);
          for (int32_t j = 0; j < np; ++j) {
            const auto [at, end] = parts_of[static_cast<size_t>(j)];
            const int32_t m = end - at;
            const KvSegment seg{k.data() + at * hd, v.data() + at * hd, m};
            float* st = stats.data() + j * nq * 2;
            attend_group_segments(q.data(), hd, nq, &seg, 1, hd, m, hd, scale, scores.data(),
                                  parts.data() + j * nq * hd, hd, st);
            for (int32_t g = 0; g < nq; ++g) {  // the stats, from the part's own scores
              double mx = -INFINITY, sum = 0;
              std::vector<double> s(static_cast<size_t>(m));
              for (int32_t p = 0; p < m; ++p) {
                double dot = 0;
                for (int32_t d = 0; d < hd; ++d) {
                  dot += double(q[size_t(g * hd + d)]) * k[size_t((at + p) * hd + d)];
                }
                s[size_t(p)] = dot * scale;
                mx = std::max(mx, s[size_t(p)]);
              }
              for (double x : s) sum += std::exp(x - mx);
              ASSERT_NEAR(st[2 * g], mx, 1e-5) << level << " hd=" << hd << " part " << j;
              ASSERT_NEAR(st[2 * g + 1], sum, 1e-5 * sum) << level << " hd=" << hd << " part " << j;
            }
          }
          std::vector<float> got(want.size(), NAN);
          for (int32_t g = 0; g < nq; ++g) {
            merge_attention_parts(parts.data() + g * hd, int64_t{nq} * hd, stats.data() + g * 2,
                                  int64_t{nq} * 2, np, hd, got.data() + g * hd);
          }
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 2e-6f)
                << level << " nq=" << nq << " hd=" << hd << " parts=" << np << " i=" << i;
          }
        }
      }
    }
  }
}

// gemma2's soft-capped attention: at every level, scores s become cap * tanh(s / cap) before
// the softmax, checked against a double-precision softmax of the capped scores; large scores
// (|s| up to ~8 against a cap of 2) make a missing cap far outside the bound.
TEST(Attention, soft_capped_scores_match_a_softmax_of_the_capped_scores_at_every_level) {
  LevelGuard guard;
  const int32_t nq = 3, n = 37, hd = 32;
  const float cap = 2.f, scale = 0.5f;
  const auto q = random_floats(size_t{nq} * hd, 61, 1.f);
  const auto k = random_floats(size_t{n} * hd, 62, 1.f);
  const auto v = random_floats(size_t{n} * hd, 63, 1.f);
  std::vector<double> want(size_t{nq} * hd, 0.0);
  for (int32_t g = 0; g < nq; ++g) {
    std::vector<double> w(n);
    double mx = -INFINITY, sum = 0;
    for (int32_t p = 0; p < n; ++p) {
      double d = 0;
      for (int32_t i = 0; i < hd; ++i) d += double{q[g * hd + i]} * k[p * hd + i];
      w[p] = cap * std::tanh(d * scale / cap);
      mx = std::max(mx, w[p]);
    }
    for (auto& e : w) sum += (e = std::exp(e - mx));
    for (int32_t p = 0; p < n; ++p) {
      for (int32_t i = 0; i < hd; ++i) want[g * hd + i] += w[p] / sum * v[p * hd + i];
    }
  }
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    const KvSegment segs[2] = {{k.data(), v.data(), 20},
                               {k.data() + 20 * hd, v.data() + 20 * hd, 17}};
    std::vector<float> scores(size_t{nq} * n), got(size_t{nq} * hd, NAN);
    attend_group_segments(q.data(), hd, nq, segs, 2, hd, n, hd, scale, scores.data(), got.data(),
                          hd, nullptr, cap);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << level << " " << i;
  }
}

TEST(Attention, one_part_merges_to_itself_bit_for_bit) {
  std::vector<float> part = random_floats(64, 51, 1.f);
  part[3] = -0.f;
  const float stats[2] = {2.5f, 17.25f};
  std::vector<float> out(64, NAN);
  merge_attention_parts(part.data(), 64, stats, 2, 1, 64, out.data());
  EXPECT_EQ(0, std::memcmp(out.data(), part.data(), part.size() * sizeof(float)));
}

TEST(Attention, the_scalar_level_runs_the_reference_and_the_others_their_own_kernel) {
  LevelGuard guard;
  const simd::AttendGroupFn ref32 = &ref::attend_group_segments;
  const simd::AttendGroupF16Fn ref16 = &ref::attend_group_segments;
  ASSERT_TRUE(set_simd_level("scalar"));
  EXPECT_EQ(active_attend_group(), ref32);
  EXPECT_EQ(active_attend_group_f16(), ref16);
  EXPECT_EQ(active_gelu_mul(), &ref::gelu_mul);
  EXPECT_EQ(active_silu_mul(), &ref::silu_mul);
  for (auto level : supported_simd_levels()) {
    if (level == "scalar") continue;
    ASSERT_TRUE(set_simd_level(level));
    EXPECT_NE(active_attend_group(), ref32) << level;
    EXPECT_NE(active_attend_group_f16(), ref16) << level;
    EXPECT_NE(active_gelu_mul(), &ref::gelu_mul) << level;
    EXPECT_NE(active_silu_mul(), &ref::silu_mul) << level;
  }
}

TEST(Gelu, gelu_mul_is_bit_identical_to_the_table_per_element_at_every_level) {
  LevelGuard guard;
  // Covers the table range, both cut-offs exactly, the pass-through / zero regions and a tail
  // shorter than a vector.
  std::vector<float> gate = random_floats(1003, 7, 14.f);
  gate[0] = -10.f;
  gate[1] = 10.f;
  gate[2] = 0.f;
  gate[3] = -9.999f;
  const std::vector<float> up = random_floats(gate.size(), 8, 2.f);
  const GeluTable& gelu = gelu_table();
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    std::vector<float> got = gate;
    gelu_mul(got.data(), up.data(), static_cast<int64_t>(got.size()));
    for (size_t i = 0; i < gate.size(); ++i) {
      ASSERT_EQ(got[i], gelu(gate[i]) * up[i]) << level << " i=" << i << " x=" << gate[i];
    }
  }
}

// SiLU at every level (the scalar twin included) against x * sigmoid(x) in double, within 1e-6
// relative (plus 1e-30 where e^-x is near float's limits); and each vector level against the scalar
// twin: the same float in all but 1 in 1,000 inputs, never more than 2 ulp apart. The second bound
// is what golden parity with llama.cpp needs (a float-polynomial exp, within 2e-7, moved a third of
// the results by up to 4 ulp and failed the llama_q4_k fixture's parity). Covers both signs, zero
// and -0, the clamps, infinities, NaN and a tail shorter than a vector.
TEST(Silu, silu_mul_rounds_as_the_scalar_twin_at_every_level) {
  LevelGuard guard;
  std::vector<float> gate = random_floats(20003, 17, 20.f);
  const float special[] = {0.f,    -0.f, 1e-30f, -1e-30f, 87.f,   -87.f,    88.5f,
                           -88.5f, 89.f, -89.f,  -100.f,  -104.f, -105.f,   -1000.f,
                           1e4f,   0.5f, -0.5f,  3.f,     -3.f,   INFINITY, -INFINITY};
  std::copy(std::begin(special), std::end(special), gate.begin());
  gate[600] = NAN;
  const std::vector<float> up = random_floats(gate.size(), 18, 2.f);
  std::vector<float> twin = gate;
  ref::silu_mul(twin.data(), up.data(), static_cast<int64_t>(twin.size()));
  for (auto level : supported_simd_levels()) {
    ASSERT_TRUE(set_simd_level(level));
    std::vector<float> got = gate;
    silu_mul(got.data(), up.data(), static_cast<int64_t>(got.size()));
    int differ = 0;
    for (size_t i = 0; i < gate.size(); ++i) {
      const double x = gate[i];
      if (std::isnan(twin[i])) {  // NaN in, and -inf (-inf / inf)
        EXPECT_TRUE(std::isnan(got[i])) << level << " i=" << i << " x=" << gate[i];
        continue;
      }
      if (std::isfinite(x)) {
        const double want = x / (1.0 + std::exp(-x)) * up[i];
        ASSERT_NEAR(got[i], want, 1e-6 * std::abs(want) + 1e-30)
            << level << " i=" << i << " x=" << x;
      }
      int32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &twin[i], 4);
      if (a == b) continue;
      ++differ;
      ASSERT_LE(std::abs(int64_t{a} - b), 2) << level << " i=" << i << " x=" << x;
    }
    EXPECT_LE(differ, static_cast<int>(gate.size() / 1000)) << level;
  }
}

// The vector levels compute the same operations per element (AVX-512 sixteen at a time, AVX2
// eight), so they agree bit for bit with each other, for SiLU as for GELU (whose every level
// is the table), at lengths that leave tails of every size below 16.
TEST(Silu, the_vector_levels_give_the_same_bits) {
  LevelGuard guard;
  const auto levels = supported_simd_levels();
  if (std::find(levels.begin(), levels.end(), "avx2") == levels.end()) {
    GTEST_SKIP() << "no vector level on this CPU";
  }
  std::vector<float> gate = random_floats(20000 + 15, 21, 20.f);
  gate[7] = NAN;
  gate[8] = INFINITY;
  gate[9] = -INFINITY;
  const std::vector<float> up = random_floats(gate.size(), 22, 2.f);
  for (int64_t n : {int64_t(gate.size()), int64_t{16 * 37 + 9}, int64_t{15}}) {
    ASSERT_TRUE(set_simd_level("avx2"));
    std::vector<float> want = gate;
    silu_mul(want.data(), up.data(), n);
    for (auto level : levels) {
      if (level == "scalar" || level == "avx2") continue;
      ASSERT_TRUE(set_simd_level(level));
      std::vector<float> got = gate;
      silu_mul(got.data(), up.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(std::memcmp(&got[size_t(i)], &want[size_t(i)], 4), 0)
            << level << " n=" << n << " i=" << i << " x=" << gate[size_t(i)];
      }
    }
  }
}

}  // namespace
}  // namespace ember::tensor
