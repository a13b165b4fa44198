// The engine on a real CPU backend: a tiny llama fixture (random weights, n_ctx 2048) so
// prompts span several 512-token prefill chunks and batches mix prefill chunks with decodes.
// These check what the FakeBackend cannot: that chunking and batching do not change a real
// model's output, and that real KV memory is returned.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "fixture/fixture.h"
#include "gguf/reader.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

class RealModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fixture::FixtureSpec spec;  // llama, 2 layers, n_embd 64, n_ctx 2048
    path_ = new std::string(::testing::TempDir() + "/ember_engine_llama.gguf");
    auto st = fixture::write_fixture(spec, *path_);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  static void TearDownTestSuite() {
    delete path_;
    path_ = nullptr;
  }
  std::shared_ptr<model::Backend> load() {
    auto f = gguf::File::open(*path_);
    EXPECT_TRUE(f.ok()) << f.message();
    auto file = std::make_shared<const gguf::File>(std::move(f).value());
    auto b = model::load_cpu_model(file, {.n_threads = 2, .n_ctx = 2048});
    EXPECT_TRUE(b.ok()) << b.message();
    return std::shared_ptr<model::Backend>(std::move(b).value());
  }
  int32_t vocab(const model::Backend& b) { return b.config().n_vocab; }
  static std::string* path_;
};
std::string* RealModel::path_ = nullptr;

// Greedy decoding straight on the backend: the whole prompt in one forward, then one token at
// a time. The engine's chunked, batched path must agree with it.
std::vector<int32_t> direct_greedy(model::Backend& b, const std::vector<int32_t>& prompt, int n) {
  const int32_t V = b.config().n_vocab;
  auto seq = b.new_sequence(int32_t(prompt.size()) + n);
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<int32_t> out;
  std::vector<int32_t> cur = prompt;
  for (int i = 0; i < n; ++i) {
    model::ForwardItem it{seq.get(), cur, true};
    EXPECT_TRUE(b.forward({&it, 1}, logits).ok());
    int32_t best = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    cur = {best};
  }
  return out;
}

TEST_F(RealModel, chunked_prefill_matches_a_single_pass_forward) {
  auto b = load();
  auto prompt = make_prompt(1100, vocab(*b), 1);
  auto want = direct_greedy(*b, prompt, 8);
  Engine e(b, {});
  Collected c = drain(*submit_ok(e, greedy_request(prompt, 8)));
  EXPECT_EQ(c.tokens, want);
  EXPECT_EQ(c.done.reason, FinishReason::Length);
  EXPECT_EQ(b->live_kv_bytes(), 0);
}

TEST_F(RealModel, joining_request_and_long_prefill_do_not_change_either_output) {
  auto b = load();
  auto pa = make_prompt(30, vocab(*b), 2);
  auto pb = make_prompt(1300, vocab(*b), 3);
  auto want_a = direct_greedy(*b, pa, 20);
  auto want_b = direct_greedy(*b, pb, 6);
  Engine e(b, {});
  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 1 && step == 2) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  auto sa = submit_ok(e, greedy_request(pa, 20));
  gate.wait_arrived();
  auto sb = submit_ok(e, greedy_request(pb, 6));  // joins while request 1 decodes
  gate.release();
  EXPECT_EQ(drain(*sa).tokens, want_a);
  EXPECT_EQ(drain(*sb).tokens, want_b);
  EXPECT_EQ(b->live_kv_bytes(), 0);
}

TEST_F(RealModel, cancel_mid_prefill_releases_quickly_with_zero_tokens_and_no_kv_left) {
  auto b = load();
  auto other_prompt = make_prompt(12, vocab(*b), 5);
  // The backend belongs to the engine thread once the engine exists: reference first.
  auto other_want = direct_greedy(*b, other_prompt, 10);
  Engine e(b, {});
  Gate gate;
  GenHooks h;
  h.on_before_prefill_chunk = [&](uint64_t id, int32_t pos) {
    if (id == 1 && pos == 1024) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  GenerateRequest g = greedy_request(make_prompt(1600, vocab(*b), 4), 50);
  g.cancel = CancelToken::make();
  CancelToken tok = g.cancel;
  auto s = submit_ok(e, std::move(g));
  auto other = submit_ok(e, greedy_request(other_prompt, 10));
  gate.wait_arrived();
  const auto t0 = SteadyClock::now();
  tok.cancel();
  gate.release();
  Collected c = drain(*s);
  // Control-plane release while blocked in the hook; not a bound on one chunk's compute.
  EXPECT_LT(SteadyClock::now() - t0, kReleaseBound);
  EXPECT_TRUE(c.tokens.empty());
  EXPECT_EQ(c.done.cause, CancelCause::Client);
  // Stopped at the prefill chunk it was cancelled before, not at a later site.
  EXPECT_EQ(c.done.timings.cancel_phase, CancelPhase::Prefill);
  EXPECT_EQ(drain(*other).tokens, other_want);
  EXPECT_EQ(b->live_kv_bytes(), 0);
}

TEST_F(RealModel, budget_and_shutdown_end_every_request_and_return_all_kv_memory) {
  auto b = load();
  EngineOptions o;
  o.max_sequences = 3;
  Engine e(b, o);
  GenerateRequest g = greedy_request(make_prompt(40, vocab(*b), 6), 50);
  g.cancel = CancelToken::with_budget(4);
  Collected c = drain(*submit_ok(e, std::move(g)));
  EXPECT_EQ(c.tokens.size(), 4u);
  EXPECT_EQ(c.done.cause, CancelCause::Budget);

  Gate gate;
  GenHooks h;
  h.on_before_decode_step = [&](uint64_t id, int32_t step) {
    if (id == 2 && step == 1) gate.arrive_and_wait();
  };
  e.set_hooks(h);
  std::vector<std::shared_ptr<EventStream>> streams;
  for (uint32_t i = 0; i < 5; ++i) {
    streams.push_back(
        submit_ok(e, greedy_request(make_prompt(20 + int32_t(i) * 300, vocab(*b), i), 40)));
  }
  gate.wait_arrived();
  e.signal_shutdown();
  gate.release();
  for (auto& s : streams) {
    Collected d = drain(*s);
    EXPECT_EQ(d.done.reason, FinishReason::Cancelled);
    EXPECT_EQ(d.done.cause, CancelCause::Shutdown);
  }
  EXPECT_EQ(b->live_kv_bytes(), 0);
}

}  // namespace
}  // namespace ember::engine
