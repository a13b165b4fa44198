// Continuous batching on the FakeBackend: one batched forward per step, requests joining
// mid-generation, chunked prefill interleaved with decodes, per-request seeded sampling.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

std::vector<int32_t> run_alone(GenerateRequest g, FakeOptions fo = {}) {
  Engine e(std::make_shared<FakeBackend>(fo), {});
  return drain(*submit_ok(e, std::move(g))).tokens;
}

TEST(EngineBatching, decode_steps_of_all_decoding_sequences_share_one_forward) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate gate;
  GenHooks h;
  h.on_before_seed = [&](uint64_t id) {
    if (id == 1) gate.arrive_and_wait();  // hold the engine until all four are queued
  };
  e.set_hooks(h);
  std::vector<std::shared_ptr<EventStream>> s;
  s.push_back(submit_ok(e, greedy_request(make_prompt(5, 64, 0), 6)));
  gate.wait_arrived();
  for (uint32_t i = 1; i < 4; ++i)
    s.push_back(submit_ok(e, greedy_request(make_prompt(5, 64, i), 6)));
  gate.release();
  for (auto& x : s) EXPECT_EQ(drain(*x).tokens.size(), 6u);
  auto recs = fake->records();
  // step 1: request 1's seed; step 2: seeds of 2..4 with request 1's first decode; then
  // five steps each decoding... every live sequence in one forward.
  ASSERT_GE(recs.size(), 3u);
  EXPECT_EQ(recs[0].items.size(), 1u);
  EXPECT_EQ(recs[1].items.size(), 4u);
  for (size_t i = 2; i < recs.size() - 1; ++i) {
    for (const auto& it : recs[i].items) EXPECT_EQ(it.n_tokens, 1);
  }
  EXPECT_EQ(fake->forward_calls(), 7) << "1 + 4 + 1 + 1 + 1 + 1 - batching, not 24 forwards";
}

TEST(EngineBatching, request_arriving_mid_generation_joins_and_both_match_their_solo_runs) {
  for (float temp : {0.f, 0.9f}) {
    SCOPED_TRACE(temp);
    FakeOptions fo;
    fo.peak = temp > 0 ? 1.f : 8.f;  // at temperature 0.9, let sampling matter
    auto fake = std::make_shared<FakeBackend>(fo);
    Engine e(fake, {});
    Gate gate;
    GenHooks h;
    h.on_before_decode_step = [&](uint64_t id, int32_t step) {
      if (id == 1 && step == 5) gate.arrive_and_wait();
    };
    e.set_hooks(h);
    GenerateRequest a = greedy_request(make_prompt(9, 64, 1), 30);
    GenerateRequest b = greedy_request(make_prompt(40, 64, 2), 12);
    a.sampling.temperature = b.sampling.temperature = temp;
    a.sampling.seed = 11;
    b.sampling.seed = 22;
    auto sa = submit_ok(e, a);
    gate.wait_arrived();  // request 1 is decoding
    auto sb = submit_ok(e, b);
    gate.release();
    Collected ca = drain(*sa), cb = drain(*sb);
    EXPECT_EQ(ca.tokens, run_alone(a, fo));
    EXPECT_EQ(cb.tokens, run_alone(b, fo));
    EXPECT_EQ(cb.tokens.size(), 12u);
    // b's seed ran in the same forward as one of a's decode steps: it joined at the next step.
    auto recs = fake->records();
    bool joined = false;
    for (const auto& r : recs) joined |= r.items.size() == 2 && r.items[1].n_tokens == 40;
    EXPECT_TRUE(joined);
  }
}

TEST(EngineBatching, long_prompt_prefill_is_interleaved_with_other_streams_decodes) {
  auto fake = std::make_shared<FakeBackend>();
  Engine e(fake, {});
  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 0) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  auto a_req = greedy_request(make_prompt(4, 64, 1), 40);
  auto sa = submit_ok(e, a_req);
  gate.wait_arrived();
  auto b_req = greedy_request(make_prompt(2000, 64, 2), 3);  // 3 prefill chunks + seed
  auto sb = submit_ok(e, b_req);
  gate.release();
  Collected ca = drain(*sa), cb = drain(*sb);
  EXPECT_EQ(ca.tokens, run_alone(a_req));
  EXPECT_EQ(cb.tokens, run_alone(b_req));
  // Every one of b's prefill chunks shared its forward with one of a's decode steps.
  int chunks_with_decode = 0;
  for (const auto& r : fake->records()) {
    bool a_decodes = false, b_prefills = false;
    for (const auto& it : r.items) {
      a_decodes |= it.seq_uid == 0 && it.n_tokens == 1;
      b_prefills |= it.seq_uid == 1 && it.n_tokens == 512;
    }
    chunks_with_decode += a_decodes && b_prefills;
  }
  EXPECT_EQ(chunks_with_decode, 3);
}

TEST(EngineBatching, seeded_sampling_is_reproducible_and_the_seed_matters) {
  FakeOptions fo;
  fo.peak = 0.5f;
  auto run = [&](uint64_t seed) {
    GenerateRequest g = greedy_request(make_prompt(12, 64, 5), 40);
    g.sampling.temperature = 1.f;
    g.sampling.top_k = 0;
    g.sampling.top_p = 0.9f;
    g.sampling.seed = seed;
    return run_alone(g, fo);
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

}  // namespace
}  // namespace ember::engine
