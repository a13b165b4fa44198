// n > 1 (forked choices), logit_bias and the TokenConstraint hook, on the FakeBackend.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

// Allows only tokens from a fixed list, in order; complete after the last one.
class ScriptConstraint final : public TokenConstraint {
 public:
  explicit ScriptConstraint(std::vector<int32_t> script) : script_(std::move(script)) {}
  bool mask(std::span<float> logits) override {
    ++masks;
    if (pos_ >= script_.size()) return false;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (int32_t(i) != script_[pos_]) logits[i] = -INFINITY;
    }
    return true;
  }
  void accept(int32_t token) override {
    EXPECT_EQ(token, script_[pos_]);
    ++pos_;
  }
  bool complete() const override { return pos_ == script_.size(); }
  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<ScriptConstraint>(*this);
  }
  int masks = 0;

 private:
  std::vector<int32_t> script_;
  size_t pos_ = 0;
};

class NothingAllowed final : public TokenConstraint {
 public:
  bool mask(std::span<float>) override { return false; }
  void accept(int32_t) override {}
  bool complete() const override { return false; }
  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<NothingAllowed>();
  }
};

GenerateRequest sampled(std::vector<int32_t> prompt, int32_t max_tokens, int32_t n) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.n = n;
  r.sampling.temperature = 1.5f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.f;
  r.sampling.min_p = 0.f;
  return r;
}

TEST(EngineChoices, n_choices_prefill_once_and_each_matches_a_single_request_with_its_seed) {
  FakeOptions fo;
  fo.peak = 0.5f;  // sampling is not decided by one favourite token
  auto fake = std::make_shared<FakeBackend>(fo);
  Engine e(fake, {});
  auto prompt = make_prompt(700, 64, 5);  // two prefill chunks
  SubmitResult sub = e.submit(sampled(prompt, 6, 3));
  ASSERT_TRUE(sub.ok());
  ASSERT_EQ(sub.forks.size(), 2u);
  std::vector<Collected> got;
  got.push_back(drain(*sub.stream));
  for (auto& f : sub.forks) got.push_back(drain(*f));
  EXPECT_EQ(fake->sequences_created() - fake->sequences_forked(), 1)
      << "one prefill, the other choices forked from it";
  EXPECT_EQ(fake->sequences_forked(), 2);
  int64_t prompt_rows = 0;
  for (const auto& rec : fake->records()) {
    for (const auto& it : rec.items) prompt_rows += it.n_tokens > 1 ? it.n_tokens : 0;
  }
  EXPECT_EQ(prompt_rows, 700) << "the prompt is prefilled exactly once";
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].done.reason, FinishReason::Length);
    EXPECT_EQ(got[i].done.usage.prompt_tokens, 700);
    EXPECT_EQ(got[i].tokens.size(), 6u);
    distinct.insert(got[i].tokens);
    // The same choice alone (n = 1, seed + i) must produce the same tokens: the fork carried
    // the whole prefilled state.
    auto alone_fake = std::make_shared<FakeBackend>(fo);
    Engine alone(alone_fake, {});
    GenerateRequest g = sampled(prompt, 6, 1);
    g.sampling.seed += i;
    EXPECT_EQ(drain(*submit_ok(alone, std::move(g))).tokens, got[i].tokens) << "choice " << i;
  }
  EXPECT_EQ(distinct.size(), 3u) << "each choice samples with its own seed";
  EXPECT_EQ(fake->live_kv_bytes(), 0);
  EXPECT_EQ(e.stats().active, 0);
}

TEST(EngineChoices, cancelling_one_choice_leaves_the_others_running) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate gate;
  e.set_hooks({.on_before_decode_step = [&](uint64_t, int32_t step) {
    if (step == 2) gate.arrive_and_wait();
  }});
  SubmitResult sub = e.submit(sampled(make_prompt(10, 64), 8, 2));
  ASSERT_TRUE(sub.ok());
  gate.wait_arrived();
  e.cancel(sub.forks[0]->id());
  gate.release();
  Collected a = drain(*sub.stream), b = drain(*sub.forks[0]);
  EXPECT_EQ(a.done.reason, FinishReason::Length);
  EXPECT_EQ(a.tokens.size(), 8u);
  EXPECT_EQ(b.done.reason, FinishReason::Cancelled);
  EXPECT_LT(b.tokens.size(), 8u);
}

TEST(EngineChoices, a_request_cancelled_before_its_seed_ends_every_choice_with_zero_tokens) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate gate;
  e.set_hooks({.on_before_seed = [&](uint64_t) { gate.arrive_and_wait(); }});
  GenerateRequest g = sampled(make_prompt(10, 64), 8, 3);
  g.cancel = CancelToken::make();
  CancelToken tok = g.cancel;
  SubmitResult sub = e.submit(std::move(g));
  gate.wait_arrived();
  tok.cancel();
  gate.release();
  for (auto* s : {&sub.stream, &sub.forks[0], &sub.forks[1]}) {
    Collected c = drain(**s);
    EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
    EXPECT_TRUE(c.tokens.empty());
  }
  EXPECT_EQ(fake->sequences_forked(), 0);
  EXPECT_EQ(e.stats().active, 0);
}

TEST(EngineChoices, n_above_max_sequences_is_refused) {
  Engine e(std::make_shared<FakeBackend>(), {.max_sequences = 2});
  SubmitResult sub = e.submit(sampled(make_prompt(4, 64), 2, 3));
  ASSERT_FALSE(sub.ok());
  EXPECT_EQ(sub.error->kind, SubmitError::Kind::InvalidRequest);
}

TEST(EngineLogitBias, a_large_bias_forces_a_token_and_a_ban_removes_the_favourite) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  auto prompt = make_prompt(10, 64, 2);
  GenerateRequest g = greedy_request(prompt, 4);
  g.sampling.logit_bias = {{7, 100.f}};
  EXPECT_EQ(drain(*submit_ok(e, std::move(g))).tokens, (std::vector<int32_t>{7, 7, 7, 7}));

  auto plain = drain(*submit_ok(e, greedy_request(prompt, 1))).tokens;
  GenerateRequest ban = greedy_request(prompt, 1);
  ban.sampling.logit_bias = {{plain[0], -100.f}};
  auto banned = drain(*submit_ok(e, std::move(ban))).tokens;
  ASSERT_EQ(banned.size(), 1u);
  EXPECT_NE(banned[0], plain[0]);
}

TEST(EngineLogitBias, a_token_outside_the_vocabulary_is_refused) {
  Engine e(std::make_shared<FakeBackend>(), {});
  GenerateRequest g = greedy_request(make_prompt(4, 64), 2);
  g.sampling.logit_bias = {{64, 1.f}};
  SubmitResult sub = e.submit(std::move(g));
  ASSERT_FALSE(sub.ok());
  EXPECT_NE(sub.error->message.find("logit_bias"), std::string::npos);
}

TEST(EngineConstraint, the_constraint_decides_every_token_and_completion_stops_the_request) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  auto c = std::make_shared<ScriptConstraint>(std::vector<int32_t>{3, 1, 4, 1, 5});
  GenerateRequest g = sampled(make_prompt(10, 64), 50, 1);
  g.constraint = c;
  Collected got = drain(*submit_ok(e, std::move(g)));
  EXPECT_EQ(got.tokens, (std::vector<int32_t>{3, 1, 4, 1, 5}));
  EXPECT_EQ(got.done.reason, FinishReason::Stop);
  EXPECT_EQ(c->masks, 5);
}

TEST(EngineConstraint, every_forked_choice_gets_its_own_copy_of_the_constraint) {
  Engine e(std::make_shared<FakeBackend>(), {});
  GenerateRequest g = sampled(make_prompt(10, 64), 50, 3);
  g.constraint = std::make_shared<ScriptConstraint>(std::vector<int32_t>{9, 8, 7});
  SubmitResult sub = e.submit(std::move(g));
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(drain(*sub.stream).tokens, (std::vector<int32_t>{9, 8, 7}));
  for (auto& f : sub.forks) {
    Collected c = drain(*f);
    EXPECT_EQ(c.tokens, (std::vector<int32_t>{9, 8, 7}));
    EXPECT_EQ(c.done.reason, FinishReason::Stop);
  }
}

TEST(EngineConstraint, a_constraint_that_allows_nothing_ends_the_request_with_an_error) {
  Engine e(std::make_shared<FakeBackend>(), {});
  GenerateRequest g = greedy_request(make_prompt(10, 64), 5);
  g.constraint = std::make_shared<NothingAllowed>();
  Collected c = drain(*submit_ok(e, std::move(g)));
  EXPECT_EQ(c.done.reason, FinishReason::Error);
  EXPECT_TRUE(c.tokens.empty());
}

}  // namespace
}  // namespace ember::engine
