// Engine basics on the FakeBackend: outputs, finish reasons, validation, admission, the event
// queue. Cancellation sites are in engine_cancel_test.cc, batching in engine_batching_test.cc.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

// What greedy decoding of the fake must produce: the engine has to feed exactly these tokens.
std::vector<int32_t> reference_greedy(const FakeBackend& f, std::vector<int32_t> hist, int n) {
  std::vector<int32_t> out;
  std::vector<float> l(size_t(f.config().n_vocab));
  for (int i = 0; i < n; ++i) {
    f.logits_for(hist, l);
    int32_t best = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(best);
    hist.push_back(best);
  }
  return out;
}

TEST(Engine, greedy_output_matches_the_models_argmax_chain_and_ends_with_length) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  auto prompt = make_prompt(10, 64);
  auto s = submit_ok(e, greedy_request(prompt, 12));
  Collected c = drain(*s);
  EXPECT_EQ(c.tokens, reference_greedy(*fake, prompt, 12));
  EXPECT_EQ(c.done.reason, FinishReason::Length);
  EXPECT_EQ(c.done.cause, CancelCause::None);
  EXPECT_EQ(c.done.usage.prompt_tokens, 10);
  EXPECT_EQ(c.done.usage.completion_tokens, 12);
  EXPECT_GE(c.done.timings.prefill_ms, 0.0);
  EXPECT_GE(c.done.timings.decode_ms, 0.0);
}

TEST(Engine, multi_chunk_prompt_gives_the_same_tokens_as_a_single_pass) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  auto prompt = make_prompt(1300, 64, 3);
  Collected c = drain(*submit_ok(e, greedy_request(prompt, 5)));
  EXPECT_EQ(c.tokens, reference_greedy(*fake, prompt, 5));
  // chunks of 512, 512, then the 276-token seed chunk, then 4 decode steps
  std::vector<int32_t> sizes;
  for (const auto& r : fake->records()) sizes.push_back(r.items.at(0).n_tokens);
  EXPECT_EQ(sizes, (std::vector<int32_t>{512, 512, 276, 1, 1, 1, 1}));
}

TEST(Engine, eog_token_finishes_with_stop_and_is_not_emitted) {
  auto fake = std::make_shared<FakeBackend>();
  auto prompt = make_prompt(8, 64, 1);
  auto ref = reference_greedy(*fake, prompt, 10);
  // first position whose token did not occur before it
  size_t k = 1;
  while (std::find(ref.begin(), ref.begin() + ptrdiff_t(k), ref[k]) != ref.begin() + ptrdiff_t(k))
    ++k;
  EngineOptions o;
  o.eog_tokens = {ref[k]};
  Engine e(fake, o);
  Collected c = drain(*submit_ok(e, greedy_request(prompt, 10)));
  EXPECT_EQ(c.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + ptrdiff_t(k)));
  EXPECT_EQ(c.done.reason, FinishReason::Stop);
  EXPECT_EQ(c.done.usage.completion_tokens, int32_t(k));
}

TEST(Engine, prompt_longer_than_context_fails_at_submit_naming_both_numbers) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  SubmitResult r = e.submit(greedy_request(make_prompt(2049, 64), 4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, SubmitError::Kind::PromptTooLong);
  EXPECT_EQ(r.error->message,
            "the prompt has 2049 tokens, but this model's context holds 2048 tokens (prompt and "
            "answer together)");
  // A prompt that fills the context leaves no room for one token: refused by the same check
  // (the engine owns it; the server trusts it).
  r = e.submit(greedy_request(make_prompt(2048, 64), 4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, SubmitError::Kind::PromptTooLong);
  EXPECT_EQ(fake->sequences_created(), 0);
  EXPECT_TRUE(e.submit(greedy_request(make_prompt(2047, 64), 4)).ok());
}

TEST(Engine, empty_prompt_and_bad_parameters_are_invalid_requests) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  SubmitResult r = e.submit(greedy_request({}, 4));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, SubmitError::Kind::InvalidRequest);
  EXPECT_NE(r.error->message.find("prompt is empty"), std::string::npos);

  r = e.submit(greedy_request({1, 64}, 4));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message.find("outside the vocabulary"), std::string::npos);

  r = e.submit(greedy_request({1}, 0));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error->message.find("max_tokens"), std::string::npos);
}

// The sampling ranges have one owner, where the values come in (the HTTP front, `ember run`'s
// options); the engine trusts them, so a value out of range is a bug it asserts.
TEST(EngineDeathTest, sampling_out_of_range_is_asserted_not_revalidated) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GenerateRequest ok = greedy_request({1}, 4);
  ASSERT_TRUE(sampling_in_range(ok.sampling));
  GenerateRequest bad = ok;
  bad.sampling.top_p = -0.1f;
  EXPECT_FALSE(sampling_in_range(bad.sampling));
  EXPECT_DEATH(
      {
        Engine e(std::make_shared<FakeBackend>(), {});
        (void)e.submit(bad);
      },
      "sampling_in_range");
  for (auto edit :
       {+[](SamplingParams& p) { p.temperature = -1.f; }, +[](SamplingParams& p) { p.top_k = -1; },
        +[](SamplingParams& p) { p.min_p = 1.5f; },
        +[](SamplingParams& p) { p.repeat_penalty = 0.f; },
        +[](SamplingParams& p) { p.top_logprobs = 21; }}) {
    SamplingParams p;
    edit(p);
    EXPECT_FALSE(sampling_in_range(p));
  }
}

TEST(Engine, max_tokens_is_clipped_to_the_context_and_ends_with_length) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Collected c = drain(*submit_ok(e, greedy_request(make_prompt(2040, 64), 100)));
  EXPECT_EQ(c.tokens.size(), 8u);
  EXPECT_EQ(c.done.reason, FinishReason::Length);
  // "As many as the context holds" (the server's default): the engine is the one clipper.
  Collected all = drain(*submit_ok(e, greedy_request(make_prompt(2040, 64), INT32_MAX)));
  EXPECT_EQ(all.tokens.size(), 8u);
  EXPECT_EQ(all.done.reason, FinishReason::Length);
}

TEST(Engine, top_p_zero_is_accepted_and_keeps_only_the_most_likely_token) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  GenerateRequest g = greedy_request(make_prompt(5, 64), 6);
  Collected greedy = drain(*submit_ok(e, g));
  g.sampling.temperature = 1.5f;
  g.sampling.top_k = 0;
  g.sampling.min_p = 0.f;
  g.sampling.top_p = 0.f;
  Collected nucleus = drain(*submit_ok(e, g));
  EXPECT_EQ(nucleus.done.reason, FinishReason::Length);
  EXPECT_EQ(nucleus.tokens, greedy.tokens);
}

TEST(Engine, token_events_carry_the_raw_log_softmax_and_top_alternatives) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  auto prompt = make_prompt(6, 64);
  GenerateRequest g = greedy_request(prompt, 3);
  g.sampling.top_logprobs = 4;
  Collected c = drain(*submit_ok(e, g));
  ASSERT_EQ(c.events.size(), 3u);
  std::vector<int32_t> hist = prompt;
  std::vector<float> l(64);
  for (const auto& ev : c.events) {
    fake->logits_for(hist, l);
    double mx = *std::max_element(l.begin(), l.end()), sum = 0;
    for (float v : l) sum += std::exp(v - mx);
    EXPECT_NEAR(ev.logprob, l[size_t(ev.id)] - mx - std::log(sum), 1e-4);
    ASSERT_EQ(ev.top.size(), 4u);
    EXPECT_EQ(ev.top[0].first, ev.id) << "greedy: the chosen token is the best alternative";
    for (size_t i = 1; i < ev.top.size(); ++i) EXPECT_LE(ev.top[i].second, ev.top[i - 1].second);
    hist.push_back(ev.id);
  }
}

TEST(Engine, deadline_in_the_past_cancels_with_cause_deadline_and_zero_tokens) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  GenerateRequest g = greedy_request(make_prompt(4, 64), 10);
  g.deadline = SteadyClock::now() - std::chrono::seconds(1);
  Collected c = drain(*submit_ok(e, g));
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
  EXPECT_EQ(c.done.cause, CancelCause::Deadline);
}

TEST(Engine, forward_failure_ends_the_batch_with_error_and_the_engine_keeps_serving) {
  FakeOptions fo;
  fo.fail_on_call = 2;  // seed, decode 0, then fail at decode 1
  auto fake = std::make_shared<FakeBackend>(fo);
  Engine e(fake, {});
  Collected c = drain(*submit_ok(e, greedy_request(make_prompt(4, 64), 10)));
  EXPECT_EQ(c.tokens.size(), 2u);
  EXPECT_EQ(c.done.reason, FinishReason::Error);
  EXPECT_NE(c.done.message.find("injected failure"), std::string::npos);
  Collected next = drain(*submit_ok(e, greedy_request(make_prompt(4, 64), 3)));
  EXPECT_EQ(next.done.reason, FinishReason::Length);
  EXPECT_EQ(fake->live_kv_bytes(), 0);
}

TEST(Engine, overloaded_submit_fails_fast_with_a_clear_error) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.max_sequences = 1;
  o.max_queued = 1;
  Engine e(fake, o);
  Gate gate;
  GenHooks h;
  h.on_before_seed = [&](uint64_t id) {
    if (id == 1) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  auto a = submit_ok(e, greedy_request(make_prompt(4, 64), 3));
  gate.wait_arrived();                                           // request 1 holds the only slot
  auto b = submit_ok(e, greedy_request(make_prompt(4, 64), 3));  // queued
  SubmitResult c = e.submit(greedy_request(make_prompt(4, 64), 3));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error->kind, SubmitError::Kind::Overloaded);
  EXPECT_NE(c.error->message.find("overloaded"), std::string::npos);
  EXPECT_EQ(e.stats().active, 1);
  EXPECT_EQ(e.stats().queued, 1);
  gate.release();
  EXPECT_EQ(drain(*a).done.reason, FinishReason::Length);
  EXPECT_EQ(drain(*b).done.reason, FinishReason::Length);
  EXPECT_TRUE(e.submit(greedy_request(make_prompt(4, 64), 1)).ok()) << "capacity came back";
}

TEST(Engine, slow_consumer_is_cancelled_and_still_gets_its_done_event) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.event_queue_capacity = 4;
  Engine e(fake, o);
  std::mutex mu;
  std::condition_variable cv;
  int wakes = 0;
  Gate gate;  // holds the seed so the waker is in place before the first push
  GenHooks h;
  h.on_before_seed = [&](uint64_t) { gate.arrive_and_wait(); };
  e.set_hooks(h);
  SubmitResult r = e.submit(greedy_request(make_prompt(4, 64), 50));
  ASSERT_TRUE(r.ok());
  gate.wait_arrived();
  // Count pushes without consuming: 4 tokens fit, then the DoneEvent; nothing more may come.
  r.stream->set_waker([&] {
    std::lock_guard lk(mu);
    ++wakes;
    cv.notify_all();
  });
  gate.release();
  {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return wakes >= 5; });
  }
  Collected c = drain(*r.stream);
  EXPECT_EQ(c.tokens.size(), 4u);
  EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
  EXPECT_EQ(c.done.cause, CancelCause::SlowConsumer);
  EXPECT_EQ(c.done.usage.completion_tokens, 4);
  EXPECT_EQ(e.stats().active, 0);
}

TEST(Engine, dropping_the_stream_cancels_the_request_and_frees_its_slot) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.max_sequences = 1;
  Engine e(fake, o);
  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 2) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  auto a = submit_ok(e, greedy_request(make_prompt(4, 64), 1000));
  gate.wait_arrived();
  a.reset();  // the client went away
  gate.release();
  // Only one slot: the next request can run only once the abandoned one let go.
  Collected b = drain(*submit_ok(e, greedy_request(make_prompt(4, 64), 2)));
  EXPECT_EQ(b.done.reason, FinishReason::Length);
  EXPECT_LT(e.stats().tokens_generated, 10u) << "the abandoned request stopped at once";
  EXPECT_EQ(fake->live_kv_bytes(), 0);
}

TEST(Engine, cancel_by_id_reports_the_given_cause) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 1) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  auto a = submit_ok(e, greedy_request(make_prompt(4, 64), 100));
  EXPECT_EQ(a->id(), 1u);
  gate.wait_arrived();
  e.cancel(a->id(), CancelCause::Deadline);
  e.cancel(a->id(), CancelCause::Client);  // first cause wins
  gate.release();
  Collected c = drain(*a);
  EXPECT_EQ(c.tokens.size(), 2u);
  EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
  EXPECT_EQ(c.done.cause, CancelCause::Deadline);
  e.cancel(a->id());  // unknown by now: a no-op
}

TEST(Engine, submit_after_shutdown_is_refused) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  e.signal_shutdown();
  e.signal_shutdown();
  SubmitResult r = e.submit(greedy_request(make_prompt(4, 64), 3));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error->kind, SubmitError::Kind::ShuttingDown);
}

TEST(Engine, names_of_reasons_and_causes) {
  EXPECT_EQ(finish_reason_name(FinishReason::Cancelled), "cancelled");
  EXPECT_EQ(finish_reason_name(FinishReason::Length), "length");
  EXPECT_EQ(cancel_cause_name(CancelCause::SlowConsumer), "slow_consumer");
  EXPECT_EQ(cancel_cause_name(CancelCause::Budget), "budget");
}

}  // namespace
}  // namespace ember::engine
