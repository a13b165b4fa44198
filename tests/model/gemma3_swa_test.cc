// Gemma 3's sliding-window layers as llama.cpp reads them from the file:
// {arch}.attention.sliding_window_pattern (a period, default 6, or one flag per layer) and
// {arch}.rope.freq_base_swa (default 10000). Besides the config, the tests check by effect on
// the logits, which does not trust ember's own reading of the pattern: with a window far
// shorter than the prompt, the first token can reach the last position's logits only through
// a layer that attends globally, and the SWA rope base matters only if some layer is windowed.
#include <gtest/gtest.h>

#include "model/model_test_util.h"

namespace ember::model {
namespace {

using testing::fixture_file;
using testing::load_fixture;
using testing::max_abs_diff;
using testing::run;

fixture::FixtureSpec gemma(int n_layer, int window) {
  fixture::FixtureSpec s;
  s.arch = "gemma3";
  s.n_layer = n_layer;
  s.sliding_window = window;
  s.seed = 11;
  return s;
}

std::vector<bool> sliding_of(const ModelConfig& c) {
  std::vector<bool> out;
  for (int32_t il = 0; il < c.n_layer; ++il) out.push_back(c.is_sliding(il));
  return out;
}

TEST(Gemma3Swa, pattern_period_comes_from_the_file) {
  auto spec = gemma(7, 16);
  spec.sliding_pattern = 3;  // layers 2 and 5 global
  auto f = fixture_file(spec, "swa_p3");
  auto cfg = read_config(*f);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(sliding_of(*cfg), (std::vector<bool>{true, true, false, true, true, false, true}));
}

TEST(Gemma3Swa, pattern_defaults_to_six_and_zero_windows_every_layer) {
  auto spec = gemma(7, 16);
  auto cfg = read_config(*fixture_file(spec, "swa_default"));
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(sliding_of(*cfg), (std::vector<bool>{true, true, true, true, true, false, true}));
  spec.sliding_pattern = 0;
  cfg = read_config(*fixture_file(spec, "swa_p0"));
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(sliding_of(*cfg), std::vector<bool>(7, true));
}

TEST(Gemma3Swa, pattern_as_per_layer_flags) {
  auto spec = gemma(4, 16);
  spec.sliding_layers = {false, true, true, false};
  auto cfg = read_config(*fixture_file(spec, "swa_flags"));
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  EXPECT_EQ(sliding_of(*cfg), spec.sliding_layers);
  spec.sliding_layers = {true, false};  // wrong length
  auto bad = read_config(*fixture_file(spec, "swa_flags_bad"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("sliding_window_pattern has 2 entries"), std::string::npos)
      << bad.message();
}

TEST(Gemma3Swa, swa_rope_base_comes_from_the_file_with_default_10000) {
  auto spec = gemma(2, 16);
  auto cfg = read_config(*fixture_file(spec, "swa_base_default"));
  ASSERT_TRUE(cfg.ok());
  EXPECT_FLOAT_EQ(cfg->rope_base_local, 10000.f);
  spec.rope_base_swa = 20000.f;
  cfg = read_config(*fixture_file(spec, "swa_base_20000"));
  ASSERT_TRUE(cfg.ok());
  EXPECT_FLOAT_EQ(cfg->rope_base_local, 20000.f);
}

// Last-position logits for a 40-token prompt, and for the same prompt with its first token
// changed: whether they differ says whether token 0 reaches position 39.
struct Reach {
  std::vector<float> base, changed;
};
Reach first_token_reach(const fixture::FixtureSpec& spec, const std::string& name) {
  auto b = load_fixture(spec, name);
  EXPECT_NE(b, nullptr);
  if (!b) return {};
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(5 + (i * 7) % 50);
  auto s1 = b->new_sequence(64);
  Reach r;
  r.base = run(*b, *s1, prompt);
  prompt[0] = 77;
  auto s2 = b->new_sequence(64);
  r.changed = run(*b, *s2, prompt);
  return r;
}

// Window 4 and 2 layers: through windowed layers alone position 39 sees back 6 positions.
TEST(Gemma3Swa,
     a_window_far_shorter_than_the_prompt_hides_the_first_token_unless_a_layer_is_global) {
  auto spec = gemma(2, 4);
  spec.sliding_pattern = 0;  // both windowed
  auto all = first_token_reach(spec, "reach_all");
  EXPECT_EQ(max_abs_diff(all.base, all.changed), 0.f);

  spec.sliding_pattern = 2;  // layer 0 windowed, layer 1 global
  auto mixed = first_token_reach(spec, "reach_mixed");
  EXPECT_GT(max_abs_diff(mixed.base, mixed.changed), 1e-3f);

  spec.sliding_pattern = -1;
  spec.sliding_layers = {false, true};  // layer 0 global, layer 1 windowed
  auto flags = first_token_reach(spec, "reach_flags");
  EXPECT_GT(max_abs_diff(flags.base, flags.changed), 1e-3f);

  spec.sliding_layers = {true, true};
  auto flags_all = first_token_reach(spec, "reach_flags_all");
  EXPECT_EQ(max_abs_diff(flags_all.base, flags_all.changed), 0.f);
}

std::vector<float> logits_with_swa_base(fixture::FixtureSpec spec, float base,
                                        const std::string& name) {
  spec.rope_base_swa = base;
  auto b = load_fixture(spec, name);
  EXPECT_NE(b, nullptr);
  if (!b) return {};
  std::vector<int32_t> prompt{3, 14, 15, 9, 26, 5, 35, 8};
  auto seq = b->new_sequence(16);
  return run(*b, *seq, prompt);
}

TEST(Gemma3Swa, swa_rope_base_changes_the_logits_only_when_a_layer_is_windowed) {
  auto spec = gemma(2, 64);
  spec.sliding_pattern = 1;  // period 1: no layer windowed
  EXPECT_EQ(max_abs_diff(logits_with_swa_base(spec, 10000.f, "base_g1"),
                         logits_with_swa_base(spec, 100.f, "base_g2")),
            0.f);
  spec.sliding_pattern = 2;  // layer 0 windowed
  EXPECT_GT(max_abs_diff(logits_with_swa_base(spec, 10000.f, "base_w1"),
                         logits_with_swa_base(spec, 100.f, "base_w2")),
            1e-3f);
}

}  // namespace
}  // namespace ember::model
