// The cancellation contract on the FakeBackend: the {cancel, shutdown} x
// {mid-prefill, between prefill and seed, mid-decode} matrix, hook positions and snapshots,
// budgets, prefixes, destroy and shutdown with work in flight, and a randomized leak check.
// See docs/architecture.md, "Cancellation contract".
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

enum class Stop { Cancel, Shutdown };
enum class At { MidPrefill, BeforeSeed, MidDecode };

struct MatrixCase {
  Stop stop;
  At at;
};

class StopMatrix : public ::testing::TestWithParam<MatrixCase> {};

// Request 1 has a 1100-token prompt: prefill chunks at 0 and 512, then the seed chunk at 1024.
// Request 2 (short prompt) runs in the same batch. The engine is held in request 1's hook at
// the chosen site; the test stops request 1 (or the engine), then releases the hook.
TEST_P(StopMatrix, stopped_request_ends_cancelled_with_exactly_the_tokens_made_before_the_stop) {
  const MatrixCase mc = GetParam();
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate gate;
  GenHooks h;
  h.on_before_prefill_chunk = [&](uint64_t id, int32_t pos) {
    if (id == 1 && mc.at == At::MidPrefill && pos == 512) gate.arrive_and_wait();
  };
  h.on_before_seed = [&](uint64_t id) {
    if (id == 1 && mc.at == At::BeforeSeed) gate.arrive_and_wait();
  };
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && mc.at == At::MidDecode && step == 0) gate.arrive_and_wait();
  };
  e.set_hooks(h);

  GenerateRequest g1 = greedy_request(make_prompt(1100, 64, 1), 50);
  g1.cancel = CancelToken::make();
  CancelToken client = g1.cancel;
  auto s1 = submit_ok(e, std::move(g1));
  auto prompt2 = make_prompt(7, 64, 2);
  auto s2 = submit_ok(e, greedy_request(prompt2, 20));

  gate.wait_arrived();
  const auto t0 = SteadyClock::now();
  if (mc.stop == Stop::Cancel) {
    client.cancel();
  } else {
    e.signal_shutdown();
  }
  gate.release();
  Collected c1 = drain(*s1);
  const auto released = SteadyClock::now() - t0;

  // Bounds control-plane release while blocked in a hook, not one chunk's wall time.
  EXPECT_LT(released, kReleaseBound);
  EXPECT_EQ(c1.done.reason, FinishReason::Cancelled);
  EXPECT_EQ(c1.done.cause, mc.stop == Stop::Cancel ? CancelCause::Client : CancelCause::Shutdown);
  // The seed makes the first token, so a stop at decode step 0 leaves exactly that one.
  EXPECT_EQ(c1.tokens.size(), mc.at == At::MidDecode ? 1u : 0u);
  EXPECT_EQ(c1.done.usage.completion_tokens, int32_t(c1.tokens.size()));
  // The work after the stop never ran: request 1's sequence holds exactly what came before.
  int32_t fed = 0;
  for (const auto& r : fake->records()) {
    for (const auto& it : r.items) {
      if (it.seq_uid == 0) fed += it.n_tokens;  // request 1 was admitted first
    }
  }
  EXPECT_EQ(fed, mc.at == At::MidPrefill ? 512 : mc.at == At::BeforeSeed ? 1024 : 1100);

  Collected c2 = drain(*s2);
  if (mc.stop == Stop::Cancel) {
    // The rest of the batch keeps going, unaffected.
    EXPECT_EQ(c2.done.reason, FinishReason::Length);
    EXPECT_EQ(c2.tokens.size(), 20u);
    Engine alone(std::make_shared<FakeBackend>(), {});
    EXPECT_EQ(c2.tokens, drain(*submit_ok(alone, greedy_request(prompt2, 20))).tokens);
  } else {
    EXPECT_EQ(c2.done.reason, FinishReason::Cancelled);
    EXPECT_EQ(c2.done.cause, CancelCause::Shutdown);
  }
}

INSTANTIATE_TEST_SUITE_P(Engine, StopMatrix,
                         ::testing::Values(MatrixCase{Stop::Cancel, At::MidPrefill},
                                           MatrixCase{Stop::Cancel, At::BeforeSeed},
                                           MatrixCase{Stop::Cancel, At::MidDecode},
                                           MatrixCase{Stop::Shutdown, At::MidPrefill},
                                           MatrixCase{Stop::Shutdown, At::BeforeSeed},
                                           MatrixCase{Stop::Shutdown, At::MidDecode}),
                         [](const auto& info) {
                           std::string s =
                               info.param.stop == Stop::Cancel ? "cancel_" : "shutdown_";
                           s += info.param.at == At::MidPrefill   ? "mid_prefill"
                                : info.param.at == At::BeforeSeed ? "between_prefill_and_seed"
                                                                  : "mid_decode";
                           return s;
                         });

struct HookLog {
  std::mutex mu;
  std::vector<std::string> events;
  void add(std::string s) {
    std::lock_guard lk(mu);
    events.push_back(std::move(s));
  }
  std::vector<std::string> take() {
    std::lock_guard lk(mu);
    return events;
  }
};

GenHooks logging_hooks(HookLog& log) {
  GenHooks h;
  h.on_before_prefill_chunk = [&log](uint64_t id, int32_t pos) {
    log.add(fmt::format("{}:prefill@{}", id, pos));
  };
  h.on_before_seed = [&log](uint64_t id) { log.add(fmt::format("{}:seed", id)); };
  h.on_before_decode_step = [&log](uint64_t id, int32_t step) {
    log.add(fmt::format("{}:decode#{}", id, step));
  };
  return h;
}

TEST(EngineHooks, multi_chunk_prompt_fires_prefill_hooks_at_chunk_positions_then_seed_then_decode) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  HookLog log;
  e.set_hooks(logging_hooks(log));
  drain(*submit_ok(e, greedy_request(make_prompt(2000, 64), 3)));
  EXPECT_EQ(log.take(), (std::vector<std::string>{"1:prefill@0", "1:prefill@512", "1:prefill@1024",
                                                  "1:seed", "1:decode#0", "1:decode#1"}));
}

TEST(EngineHooks, short_prompt_is_a_single_seed_chunk) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  HookLog log;
  e.set_hooks(logging_hooks(log));
  drain(*submit_ok(e, greedy_request(make_prompt(512, 64), 2)));
  EXPECT_EQ(log.take(), (std::vector<std::string>{"1:seed", "1:decode#0"}));
}

TEST(EngineHooks, cancel_after_the_first_chunk_stops_before_the_second) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  HookLog log;
  GenHooks h = logging_hooks(log);
  GenerateRequest g = greedy_request(make_prompt(2000, 64), 3);
  g.cancel = CancelToken::make();
  CancelToken tok = g.cancel;
  // A hook may cancel a request's token (a flag store, not a control-plane call).
  auto inner = h.on_before_prefill_chunk;
  h.on_before_prefill_chunk = [inner, tok](uint64_t id, int32_t pos) {
    inner(id, pos);
    if (pos == 512) tok.cancel();
  };
  e.set_hooks(h);
  Collected c = drain(*submit_ok(e, std::move(g)));
  EXPECT_EQ(c.done.cause, CancelCause::Client);
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_EQ(log.take(), (std::vector<std::string>{"1:prefill@0", "1:prefill@512"}));
  ASSERT_EQ(fake->records().size(), 1u) << "only the first chunk ran";
  EXPECT_EQ(fake->records()[0].items[0].n_tokens, 512);
}

TEST(EngineHooks, budget_counts_prefill_chunks_as_steps) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  GenerateRequest g = greedy_request(make_prompt(1100, 64), 50);
  g.cancel = CancelToken::with_budget(1);  // chunk 0 runs; the poll before chunk 512 trips
  CancelToken tok = g.cancel;
  Collected c = drain(*submit_ok(e, std::move(g)));
  EXPECT_EQ(c.done.cause, CancelCause::Budget);
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_EQ(fake->records().size(), 1u);
  EXPECT_EQ(tok.polls(), 2u);

  GenerateRequest g5 = greedy_request(make_prompt(1100, 64), 50);
  g5.cancel = CancelToken::with_budget(5);  // 2 chunks + seed + 2 decode steps
  Collected c5 = drain(*submit_ok(e, std::move(g5)));
  EXPECT_EQ(c5.tokens.size(), 3u);
}

TEST(EngineHooks, hooks_snapshot_stays_stable_when_hooks_are_cleared_mid_generation) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  HookLog log;
  Gate gate;
  GenHooks h = logging_hooks(log);
  auto inner = h.on_before_prefill_chunk;
  h.on_before_prefill_chunk = [inner, &gate](uint64_t id, int32_t pos) {
    inner(id, pos);
    if (id == 1 && pos == 0) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  auto s1 = submit_ok(e, greedy_request(make_prompt(600, 64), 3));
  gate.wait_arrived();
  e.set_hooks({});  // request 1 keeps the hooks it was admitted with
  gate.release();
  drain(*s1);
  drain(*submit_ok(e, greedy_request(make_prompt(600, 64), 3)));  // admitted without hooks
  EXPECT_EQ(log.take(),
            (std::vector<std::string>{"1:prefill@0", "1:seed", "1:decode#0", "1:decode#1"}));
}

TEST(EngineBudget, budget_of_n_yields_exactly_n_tokens_with_one_poll_per_step) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  for (uint64_t n : {0u, 1u, 2u, 7u}) {
    GenerateRequest g = greedy_request(make_prompt(20, 64), 100);
    g.cancel = CancelToken::with_budget(n);
    CancelToken tok = g.cancel;
    Collected c = drain(*submit_ok(e, std::move(g)));
    EXPECT_EQ(c.tokens.size(), n);
    EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
    EXPECT_EQ(c.done.cause, CancelCause::Budget);
    EXPECT_EQ(tok.polls(), n + 1) << "n polls that said go, one that tripped";
  }
  // A request that ends by length polled exactly once per step it ran.
  GenerateRequest g = greedy_request(make_prompt(20, 64), 6);
  g.cancel = CancelToken::make();
  CancelToken tok = g.cancel;
  EXPECT_EQ(drain(*submit_ok(e, std::move(g))).tokens.size(), 6u);
  EXPECT_EQ(tok.polls(), 6u);
}

TEST(EngineBudget, cancelled_output_is_a_prefix_of_the_uncancelled_output) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  auto prompt = make_prompt(700, 64, 9);
  std::vector<int32_t> full = drain(*submit_ok(e, greedy_request(prompt, 30))).tokens;
  ASSERT_EQ(full.size(), 30u);
  for (uint64_t n : {2u, 3u, 10u, 25u}) {
    GenerateRequest g = greedy_request(prompt, 30);
    g.cancel = CancelToken::with_budget(n);  // 1 prefill chunk + seed + decode steps
    Collected c = drain(*submit_ok(e, std::move(g)));
    ASSERT_EQ(c.tokens.size(), n - 1);
    EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), full.begin()));
  }
}

TEST(EngineLifecycle, destroy_mid_prefill_joins_within_the_bound) {
  auto fake = std::make_shared<FakeBackend>();
  auto e = std::make_unique<Engine>(fake, EngineOptions{});
  Gate gate;
  std::atomic<bool> destroying{false};
  GenHooks h;
  h.on_before_prefill_chunk = [&](uint64_t, int32_t pos) {
    if (pos == 512) gate.arrive_and_wait();
  };
  e->set_hooks(h);
  auto s = submit_ok(*e, greedy_request(make_prompt(1100, 64), 500));
  gate.wait_arrived();
  // The hook would block forever; a helper releases it once destruction has begun. (This
  // proves destruction completes once the hook returns, not that it can preempt a hook.)
  std::thread releaser([&] {
    while (!destroying.load()) std::this_thread::yield();
    gate.release();
  });
  const auto t0 = SteadyClock::now();
  destroying.store(true);
  e.reset();
  const auto took = SteadyClock::now() - t0;
  releaser.join();
  EXPECT_LT(took, kReleaseBound);
  Collected c = drain(*s);  // the stream outlives the engine and still has its end
  EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
  EXPECT_EQ(c.done.cause, CancelCause::Shutdown);
  EXPECT_EQ(fake->live_kv_bytes(), 0);
}

TEST(EngineLifecycle, shutdown_with_many_requests_in_flight_ends_every_one) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.max_sequences = 4;
  o.max_queued = 16;
  Engine e(fake, o);
  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 3) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  std::vector<std::shared_ptr<EventStream>> streams;
  for (int i = 0; i < 12; ++i) {
    streams.push_back(submit_ok(e, greedy_request(make_prompt(5 + i * 90, 64, uint32_t(i)), 200)));
  }
  gate.wait_arrived();
  e.signal_shutdown();
  gate.release();
  int ended = 0;
  for (auto& s : streams) {
    Collected c = drain(*s);
    ASSERT_EQ(c.n_done, 1);
    EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
    EXPECT_EQ(c.done.cause, CancelCause::Shutdown);
    ++ended;
  }
  EXPECT_EQ(ended, 12);
  EXPECT_EQ(e.stats().active, 0);
  EXPECT_EQ(e.stats().queued, 0);
  EXPECT_EQ(fake->live_kv_bytes(), 0);
}

// 100 requests, each stopped (or not) at a random point by a random mechanism, all decided
// while the engine is held in request 1's hook so that every stop lands before the request
// could finish by length. Each request must end with the cause its mechanisms dictate and
// exactly the tokens they allow; nothing may be left behind: no active slot, no queued
// request, no KV memory, one DoneEvent each.
TEST(EngineLifecycle, hundred_randomly_cancelled_requests_leave_no_slot_or_kv_memory_behind) {
  auto fake = std::make_shared<FakeBackend>();
  EngineOptions o;
  o.max_sequences = 6;
  o.max_queued = 100;
  o.prefill_chunk = 64;
  Engine e(fake, o);
  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 0) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  struct Plan {
    int32_t max_tokens = 0;
    int32_t chunks = 0;  // non-final prefill chunks
    std::optional<uint64_t> budget;
    bool token = false, by_id = false, deadline = false;
  };
  std::mt19937 rng(12345);
  std::vector<Plan> plans(100);
  std::vector<std::shared_ptr<EventStream>> streams;
  std::vector<CancelToken> late;  // cancelled by this thread before the engine is released
  for (int i = 0; i < 100; ++i) {
    Plan& p = plans[size_t(i)];
    const int32_t n_prompt = 1 + int32_t(rng() % 300);
    p.chunks = (n_prompt - 1) / o.prefill_chunk;
    p.max_tokens = 20 + int32_t(rng() % 40);
    GenerateRequest g = greedy_request(make_prompt(n_prompt, 64, uint32_t(i)), p.max_tokens);
    g.sampling.temperature = (rng() % 2) ? 0.f : 0.9f;
    g.sampling.seed = rng();
    switch (i == 0 ? 4 : rng() % 5) {  // request 1 holds the gate: it runs freely
      case 0:
        p.budget = rng() % 70;
        g.cancel = CancelToken::with_budget(*p.budget);
        break;
      case 1:
        p.token = true;
        g.cancel = CancelToken::make();
        late.push_back(g.cancel);
        break;
      case 2:
        p.deadline = true;
        g.deadline = SteadyClock::now();
        break;
      default:
        break;
    }
    streams.push_back(submit_ok(e, std::move(g)));
    if (i == 0) gate.wait_arrived();
    if (i > 0 && rng() % 4 == 0) {
      p.by_id = true;
      e.cancel(streams.back()->id(), CancelCause::Client);
    }
    if (!late.empty() && rng() % 3 == 0) late[rng() % late.size()].cancel();
  }
  for (auto& t : late) t.cancel();
  gate.release();
  int n_done = 0, cut_by_budget = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    const Plan& p = plans[i];
    Collected c = drain(*streams[i]);
    n_done += c.n_done;
    EXPECT_EQ(c.done.usage.completion_tokens, int32_t(c.tokens.size()));
    SCOPED_TRACE(::testing::Message() << "request " << i + 1);
    if (p.by_id || p.token || p.deadline) {
      // Cancelled while still queued behind the gate: it makes nothing.
      EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
      EXPECT_EQ(c.done.cause, p.by_id || p.token ? CancelCause::Client : CancelCause::Deadline);
      EXPECT_TRUE(c.tokens.empty());
    } else if (p.budget && *p.budget < uint64_t(p.chunks + p.max_tokens)) {
      EXPECT_EQ(c.done.reason, FinishReason::Cancelled);
      EXPECT_EQ(c.done.cause, CancelCause::Budget);
      EXPECT_EQ(int32_t(c.tokens.size()), std::max<int32_t>(0, int32_t(*p.budget) - p.chunks));
      ++cut_by_budget;
    } else {
      EXPECT_EQ(c.done.reason, FinishReason::Length);
      EXPECT_EQ(int32_t(c.tokens.size()), p.max_tokens);
    }
  }
  EXPECT_EQ(n_done, 100);
  EXPECT_GT(cut_by_budget, 5);  // the budgets really cut generation short
  EXPECT_EQ(e.stats().active, 0);
  EXPECT_EQ(e.stats().queued, 0);
  EXPECT_EQ(e.stats().kv_bytes, 0);
  EXPECT_EQ(fake->live_kv_bytes(), 0);
}

}  // namespace
}  // namespace ember::engine
