#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>

namespace ember::engine {
namespace {

SamplingParams plain(float temperature) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.f;
  p.min_p = 0.f;
  return p;
}

std::vector<float> log_softmax(const std::vector<float>& l) {
  double mx = *std::max_element(l.begin(), l.end());
  double s = 0;
  for (float v : l) s += std::exp(v - mx);
  std::vector<float> out;
  for (float v : l) out.push_back(float(v - mx - std::log(s)));
  return out;
}

TEST(Rng, same_seed_same_stream_and_different_seeds_differ) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    EXPECT_NE(x, c.next());
  }
  Rng u(7);
  for (int i = 0; i < 1000; ++i) {
    double v = u.uniform();
    ASSERT_GE(v, 0.0);
    ASSERT_LT(v, 1.0);
  }
}

TEST(Sampler, temperature_zero_is_argmax_and_ties_go_to_the_lower_id) {
  Sampler s(plain(0.f), 5);
  EXPECT_EQ(s.sample(std::vector<float>{0.f, 3.f, 1.f, 3.f, -2.f}).token, 1);
  EXPECT_EQ(s.sample(std::vector<float>{-1.f, -1.f, -1.f, -1.f, 0.f}).token, 4);
}

// The greedy pick equals a plain first-maximum scan for every length (whole groups of 8 and a
// tail), with many ties across positions and NaNs anywhere but the first logit (never chosen).
TEST(Sampler, greedy_pick_is_the_first_maximum_for_any_length_with_ties_and_nans) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(-4, 4), coin(0, 9);
  for (int32_t n : {1, 2, 7, 8, 9, 15, 16, 17, 64, 100, 1003}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<float> v(static_cast<size_t>(n));
      for (float& x : v) x = static_cast<float>(level(rng));
      for (size_t i = 1; i < v.size(); ++i) {
        if (coin(rng) == 0) v[i] = std::nanf("");
      }
      int32_t want = 0;
      for (int32_t i = 1; i < n; ++i) {
        if (v[static_cast<size_t>(i)] > v[static_cast<size_t>(want)]) want = i;
      }
      Sampler s(plain(0.f), n);
      ASSERT_EQ(s.sample(v).token, want) << "n=" << n << " rep=" << rep;
    }
  }
  std::vector<float> nan_first = {std::nanf(""), 5.f, 9.f};
  EXPECT_EQ(Sampler(plain(0.f), 3).sample(nan_first).token, 0);
}

TEST(Sampler, top_k_one_is_greedy_at_any_temperature) {
  SamplingParams p = plain(5.f);
  p.top_k = 1;
  Sampler s(p, 4);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(s.sample(std::vector<float>{0.f, 1.f, 0.9f, 0.5f}).token, 1);
}

TEST(Sampler, same_seed_reproduces_and_different_seed_diverges) {
  std::vector<float> flat(32, 0.f);
  for (int i = 0; i < 32; ++i) flat[size_t(i)] = 0.01f * float(i);
  auto run = [&](uint64_t seed) {
    SamplingParams p = plain(1.f);
    p.seed = seed;
    Sampler s(p, 32);
    std::vector<int32_t> out;
    for (int i = 0; i < 40; ++i) {
      out.push_back(s.sample(flat).token);
      s.accept(out.back());
    }
    return out;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_NE(run(1), run(2));
}

TEST(Sampler, top_k_limits_draws_to_the_k_best) {
  SamplingParams p = plain(1.f);
  p.top_k = 2;
  Sampler s(p, 5);
  std::vector<float> l{1.f, 0.f, 1.2f, 0.9f, 1.1f};
  std::set<int32_t> seen;
  for (int i = 0; i < 300; ++i) seen.insert(s.sample(l).token);
  EXPECT_EQ(seen, (std::set<int32_t>{2, 4}));
}

TEST(Sampler, top_p_keeps_the_smallest_nucleus_reaching_p) {
  SamplingParams p = plain(1.f);
  p.top_p = 0.6f;
  Sampler s(p, 3);
  // probabilities 0.5, 0.3, 0.2: 0.5 < 0.6 so the nucleus is {0, 1}
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  std::map<int32_t, int> n;
  for (int i = 0; i < 2000; ++i) n[s.sample(l).token]++;
  EXPECT_EQ(n.count(2), 0u);
  EXPECT_NEAR(n[0] / 2000.0, 0.625, 0.05) << "renormalised 0.5 / 0.8";
}

TEST(Sampler, min_p_drops_tokens_below_a_fraction_of_the_best) {
  SamplingParams p = plain(1.f);
  p.min_p = 0.5f;
  Sampler s(p, 3);
  std::vector<float> l{std::log(0.5f), std::log(0.3f), std::log(0.2f)};  // 0.2 < 0.25
  std::set<int32_t> seen;
  for (int i = 0; i < 500; ++i) seen.insert(s.sample(l).token);
  EXPECT_EQ(seen, (std::set<int32_t>{0, 1}));
}

TEST(Sampler, temperature_draws_follow_the_softened_distribution) {
  SamplingParams p = plain(2.f);
  Sampler s(p, 2);
  std::vector<float> l{0.f, 2.f};  // at T=2: softmax(0, 1) -> p1 = 0.731
  int ones = 0;
  for (int i = 0; i < 4000; ++i) ones += s.sample(l).token == 1;
  EXPECT_NEAR(ones / 4000.0, 0.731, 0.03);
}

TEST(Sampler, repetition_penalty_divides_positive_and_multiplies_negative_logits) {
  SamplingParams p = plain(0.f);
  p.repeat_penalty = 2.f;
  p.repeat_last_n = 2;
  Sampler s(p, 4);
  // token 0 (3.0) is in the window -> 1.5 < token 1 (2.0)
  s.add_prompt(std::vector<int32_t>{3, 0});
  EXPECT_EQ(s.sample(std::vector<float>{3.f, 2.f, -5.f, -5.f}).token, 1);
  // negative: token 3 at -1 becomes -2, below token 2 at -1.5
  Sampler s2(p, 4);
  s2.add_prompt(std::vector<int32_t>{3});
  EXPECT_EQ(s2.sample(std::vector<float>{-9.f, -9.f, -1.5f, -1.f}).token, 2);
}

TEST(Sampler, repetition_penalty_only_looks_at_the_last_n_tokens) {
  SamplingParams p = plain(0.f);
  p.repeat_penalty = 100.f;
  p.repeat_last_n = 2;
  Sampler s(p, 4);
  s.add_prompt(std::vector<int32_t>{0, 2, 3});  // token 0 fell out of the window
  EXPECT_EQ(s.sample(std::vector<float>{3.f, 2.f, -5.f, -5.f}).token, 0);
}

TEST(Sampler, presence_and_frequency_penalise_completion_tokens_only) {
  SamplingParams p = plain(0.f);
  p.frequency_penalty = 0.6f;
  Sampler s(p, 3);
  s.add_prompt(std::vector<int32_t>{0, 0, 0});  // the prompt does not count
  std::vector<float> l{2.f, 1.f, 0.f};
  EXPECT_EQ(s.sample(l).token, 0);
  s.accept(0);
  EXPECT_EQ(s.sample(l).token, 0) << "2 - 0.6 = 1.4 still wins";
  s.accept(0);
  EXPECT_EQ(s.sample(l).token, 1) << "2 - 1.2 = 0.8 loses to 1";

  SamplingParams q = plain(0.f);
  q.presence_penalty = 1.5f;
  Sampler t(q, 3);
  EXPECT_EQ(t.sample(l).token, 0);
  t.accept(0);
  EXPECT_EQ(t.sample(l).token, 1) << "presence: 2 - 1.5 = 0.5 < 1";
}

TEST(Sampler, logprobs_are_log_softmax_of_raw_logits_regardless_of_sampling_settings) {
  std::vector<float> l{0.5f, 2.f, -1.f, 1.f, 0.f};
  auto ref = log_softmax(l);
  SamplingParams p = plain(0.f);
  p.top_logprobs = 3;
  p.repeat_penalty = 5.f;  // changes the choice inputs but not the reported logprobs
  Sampler s(p, 5);
  TokenChoice c = s.sample(l);
  EXPECT_EQ(c.token, 1);
  EXPECT_NEAR(c.logprob, ref[1], 1e-5);
  ASSERT_EQ(c.top.size(), 3u);
  EXPECT_EQ(c.top[0].first, 1);
  EXPECT_EQ(c.top[1].first, 3);
  EXPECT_EQ(c.top[2].first, 0);
  EXPECT_NEAR(c.top[1].second, ref[3], 1e-5);
  SamplingParams hot = plain(3.f);
  Sampler h(hot, 5);
  TokenChoice d = h.sample(l);
  EXPECT_NEAR(d.logprob, ref[size_t(d.token)], 1e-5) << "temperature does not change logprobs";
  EXPECT_TRUE(d.top.empty());
}

TEST(Sampler, greedy_without_logprobs_is_the_same_argmax_and_reports_no_logprob) {
  std::vector<float> l{0.5f, 2.f, -1.f, 2.f, 0.f};
  SamplingParams with = plain(0.f);
  SamplingParams without = with;
  without.logprobs = false;
  Sampler a(with, 5), b(without, 5);
  const TokenChoice ca = a.sample(l), cb = b.sample(l);
  EXPECT_EQ(ca.token, 1);
  EXPECT_EQ(cb.token, 1) << "ties still go to the lower id";
  EXPECT_NEAR(ca.logprob, log_softmax(l)[1], 1e-5);
  EXPECT_EQ(cb.logprob, 0.f) << "no softmax was computed";
  // top_logprobs asks for the softmax even with logprobs off
  without.top_logprobs = 1;
  Sampler c(without, 5);
  EXPECT_NEAR(c.sample(l).logprob, log_softmax(l)[1], 1e-5);
  // a penalty still applies on the greedy path
  without.top_logprobs = 0;
  without.presence_penalty = 5.f;
  Sampler d(without, 5);
  d.accept(1);
  EXPECT_EQ(d.sample(l).token, 3);
}

}  // namespace
}  // namespace ember::engine
