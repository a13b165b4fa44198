// Lifecycle corners the cancellation contract depends on, each pinned so that deleting the
// mechanism fails a test: shutdown racing a submit, the second peek in a step, the sweep of
// queued requests, and the cancel latency the engine reports per phase.
#include <gtest/gtest.h>

#include <thread>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

// Reads a stream to its DoneEvent without blocking forever: nullopt if none came in time.
std::optional<DoneEvent> done_within(EventStream& s, std::chrono::milliseconds limit) {
  const auto until = SteadyClock::now() + limit;
  while (SteadyClock::now() < until) {
    while (auto ev = s.try_next()) {
      if (auto* d = std::get_if<DoneEvent>(&*ev)) return *d;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return std::nullopt;
}

// A request accepted just before signal_shutdown() must still get its DoneEvent: the engine
// may only leave its loop once it has seen, under the mailbox lock, that nothing is waiting.
// Made deterministic by holding the engine thread inside a DoneEvent waker (request 2 ends
// in the queue sweep, with nothing else active) while request 3 is submitted and the engine
// is told to shut down: the engine's next look at its loop condition must find request 3.
TEST(EngineShutdown, a_request_submitted_as_shutdown_begins_always_gets_its_done_event) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate hook, waker;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t) {
    if (id == 1) hook.arrive_and_wait();
  };
  e.set_hooks(h);
  auto s1 = submit_ok(e, greedy_request(make_prompt(3, 64), 50));
  hook.wait_arrived();  // the engine thread is busy: request 2's waker is set in time
  GenerateRequest g2 = greedy_request(make_prompt(3, 64, 2), 4);
  g2.deadline = SteadyClock::now();  // ends in the sweep of the queue, before admission
  auto s2 = submit_ok(e, std::move(g2));
  bool once = false;
  s2->set_waker([&] {
    if (!once) {
      once = true;
      waker.arrive_and_wait();
    }
  });
  e.cancel(s1->id(), CancelCause::Client);
  hook.release();
  waker.wait_arrived();  // inside finish(request 2); nothing is active or queued
  auto s3 = submit_ok(e, greedy_request(make_prompt(3, 64, 3), 4));
  e.signal_shutdown();
  waker.release();
  auto d = done_within(*s3, std::chrono::seconds(5));
  ASSERT_TRUE(d.has_value()) << "a request accepted before the shutdown got no DoneEvent";
  EXPECT_EQ(d->reason, FinishReason::Cancelled);
  EXPECT_EQ(d->cause, CancelCause::Shutdown);
  EXPECT_EQ(drain(*s1).done.cause, CancelCause::Client);
}

// Requests 1 and 2 decode in the same batch. Request 2's hook blocks after request 1 passed its
// poll and re-poll for this step; a cancel of request 1 arriving then must still stop it before
// the step's work (the second peek), so it keeps the 4 tokens it had. A one-token request holds
// the engine in its seed while both are submitted, so both are admitted in the same round and
// their steps line up (without it the engine can finish request 1 before request 2 arrives).
TEST(EngineStep, a_cancel_landing_while_a_later_hook_blocks_stops_the_earlier_request_this_step) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate hold, gate;
  GenHooks h;
  h.on_before_seed = [&](uint64_t id) {
    if (id == 1) hold.arrive_and_wait();
  };
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 3 && step == 3) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  std::vector<int32_t> prompt = make_prompt(6, 64);
  auto s0 = submit_ok(e, greedy_request(make_prompt(6, 64, 9), 1));
  hold.wait_arrived();
  auto s1 = submit_ok(e, greedy_request(prompt, 100));
  auto s2 = submit_ok(e, greedy_request(prompt, 100));
  ASSERT_EQ(s1->id(), 2u);
  ASSERT_EQ(s2->id(), 3u);
  hold.release();
  gate.wait_arrived();
  e.cancel(s1->id(), CancelCause::Client);
  gate.release();
  Collected c1 = drain(*s1);
  EXPECT_EQ(c1.done.reason, FinishReason::Cancelled);
  EXPECT_EQ(c1.tokens.size(), 4u) << "the cancelled request ran the step its cancel preceded";
  e.cancel(s2->id(), CancelCause::Client);
  drain(*s2);
  EXPECT_EQ(drain(*s0).done.reason, FinishReason::Length);
}

// One slot, one place in the queue. A queued request cancelled while the slot stays busy must
// leave the queue at once, so another request can take its place before the slot frees.
TEST(EngineQueue, a_queued_cancel_frees_its_place_while_the_slots_are_busy) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.max_sequences = 1;
  o.max_queued = 1;
  Engine e(fake, o);
  Gate first, second;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 2) first.arrive_and_wait();
    if (id == 1 && step == 5) second.arrive_and_wait();
  };
  e.set_hooks(h);
  auto a = submit_ok(e, greedy_request(make_prompt(4, 64), 100));
  first.wait_arrived();
  auto b = submit_ok(e, greedy_request(make_prompt(4, 64, 1), 100));
  EXPECT_FALSE(e.submit(greedy_request(make_prompt(4, 64, 2), 5)).ok()) << "queue is full";
  e.cancel(b->id(), CancelCause::Client);
  first.release();
  second.wait_arrived();  // the engine went round its loop at least once; the slot is busy
  EXPECT_EQ(e.stats().queued, 0);
  EXPECT_EQ(e.stats().active, 1);
  SubmitResult c = e.submit(greedy_request(make_prompt(4, 64, 3), 5));
  EXPECT_TRUE(c.ok()) << (c.error ? c.error->message : "");
  second.release();
  Collected cb = drain(*b);
  EXPECT_EQ(cb.done.reason, FinishReason::Cancelled);
  EXPECT_TRUE(cb.tokens.empty());
  e.cancel(a->id(), CancelCause::Client);
  drain(*a);
  if (c.ok()) {
    EXPECT_EQ(drain(*c.stream).done.reason, FinishReason::Length);
  }
}

// Each cancelled request reports how long the engine took from the cancel to the release and
// the phase it was in; a request that was not cancelled reports none.
TEST(EngineCancelLatency, done_event_reports_the_phase_and_the_time_from_cancel_to_release) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.max_sequences = 1;
  o.prefill_chunk = 8;
  Engine e(fake, o);
  Gate prefill, seed, decode;
  GenHooks h;
  h.on_before_prefill_chunk = [&](uint64_t id, int32_t pos) {
    if (id == 1 && pos == 8) prefill.arrive_and_wait();
  };
  h.on_before_seed = [&](uint64_t id) {
    if (id == 2) seed.arrive_and_wait();
  };
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 3 && step == 1) decode.arrive_and_wait();
  };
  e.set_hooks(h);
  auto run = [&](Gate& g, uint64_t expect_id, int32_t n_prompt) {
    auto s = submit_ok(e, greedy_request(make_prompt(n_prompt, 64, uint32_t(expect_id)), 50));
    EXPECT_EQ(s->id(), expect_id);
    g.wait_arrived();
    e.cancel(s->id(), CancelCause::Client);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // a measurable latency
    g.release();
    return drain(*s).done;
  };
  DoneEvent p = run(prefill, 1, 30);
  EXPECT_EQ(p.timings.cancel_phase, CancelPhase::Prefill);
  DoneEvent sd = run(seed, 2, 5);
  EXPECT_EQ(sd.timings.cancel_phase, CancelPhase::Seed);
  // Request 4 waits behind request 3 (one slot) and is cancelled there.
  auto s3 = submit_ok(e, greedy_request(make_prompt(5, 64, 3), 50));
  decode.wait_arrived();
  auto s4 = submit_ok(e, greedy_request(make_prompt(5, 64, 4), 50));
  e.cancel(s3->id(), CancelCause::Client);
  e.cancel(s4->id(), CancelCause::Client);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  decode.release();
  DoneEvent d = drain(*s3).done;
  DoneEvent q = drain(*s4).done;
  EXPECT_EQ(d.timings.cancel_phase, CancelPhase::Decode);
  EXPECT_EQ(q.timings.cancel_phase, CancelPhase::Queued);
  for (const DoneEvent* x : {&p, &sd, &d, &q}) {
    EXPECT_EQ(x->reason, FinishReason::Cancelled);
    EXPECT_GE(x->timings.cancel_ms, 25.0);  // measured from the cancel, not from the poll
    EXPECT_LT(x->timings.cancel_ms, 2000.0);
  }
  Collected ok = drain(*submit_ok(e, greedy_request(make_prompt(5, 64, 5), 3)));
  EXPECT_EQ(ok.done.timings.cancel_ms, -1);
  EXPECT_EQ(cancel_phase_name(CancelPhase::Seed), "seed");
}

}  // namespace
}  // namespace ember::engine
