// Forward pass invariants: chunking, batching and cache growth never change the logits.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model_test_util.h"

namespace ember::model {
namespace {

using ::testing::HasSubstr;
using namespace ember::model::testing;

fixture::FixtureSpec spec_for(const std::string& arch) {
  fixture::FixtureSpec s;
  s.arch = arch;
  if (arch == "gemma3") s.n_layer = 6;  // five sliding-window layers and one global
  return s;
}

class ForwardPerArch : public ::testing::TestWithParam<std::string> {};

TEST_P(ForwardPerArch, chunked_prefill_matches_one_shot) {
  auto b = load_fixture(spec_for(GetParam()), "chunk_" + GetParam());
  ASSERT_TRUE(b);
  auto toks = tokens(300, b->config().n_vocab);  // crosses gemma3's 128-token window
  auto one = b->new_sequence(512);
  auto whole = run(*b, *one, toks);
  auto chunked = b->new_sequence(512);
  std::vector<float> last;
  for (size_t at = 0; at < toks.size(); at += 67) {
    const size_t n = std::min<size_t>(67, toks.size() - at);
    last = run(*b, *chunked, std::span(toks).subspan(at, n));
  }
  EXPECT_EQ(chunked->length(), 300);
  EXPECT_LT(max_abs_diff(whole, last), 1e-3f);
}

TEST_P(ForwardPerArch, a_forked_sequence_continues_exactly_like_its_source) {
  auto b = load_fixture(spec_for(GetParam()), "fork_" + GetParam());
  ASSERT_TRUE(b);
  const int32_t V = b->config().n_vocab;
  auto prompt = tokens(290, V, 7);  // two growth chunks of KV: the copy crosses them
  auto src = b->new_sequence(512);
  run(*b, *src, prompt);
  const int64_t before = b->live_kv_bytes();
  auto fork = b->fork_sequence(*src, 400);
  EXPECT_EQ(fork->length(), 290);
  EXPECT_EQ(fork->capacity(), 400);
  EXPECT_GT(b->live_kv_bytes(), before) << "a fork's KV memory is counted";
  auto next = tokens(3, V, 8);
  auto from_fork = run(*b, *fork, next);
  auto from_src = run(*b, *src, next);
  EXPECT_EQ(max_abs_diff(from_fork, from_src), 0.f);
  fork.reset();
  // (Not `before`: past gemma3's window the source has since let go of sliding parts.)
  EXPECT_EQ(b->live_kv_bytes(), src->kv_bytes()) << "and returned when it goes";
}

TEST_P(ForwardPerArch, batch_of_three_matches_each_alone) {
  auto b = load_fixture(spec_for(GetParam()), "batch_" + GetParam());
  ASSERT_TRUE(b);
  const int32_t V = b->config().n_vocab;
  // Three sequences at different stages: a fresh prefill, a decode step, a mid prefill chunk.
  std::vector<std::vector<int32_t>> history = {{}, tokens(40, V, 1), tokens(20, V, 2)};
  std::vector<std::vector<int32_t>> step = {tokens(13, V, 3), tokens(1, V, 4), tokens(9, V, 5)};
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < 3; ++i) {
    auto seq = b->new_sequence(128);
    if (!history[i].empty()) run(*b, *seq, history[i]);
    alone.push_back(run(*b, *seq, step[i]));
  }
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (int i = 0; i < 3; ++i) {
    seqs.push_back(b->new_sequence(128));
    if (!history[i].empty()) run(*b, *seqs[i], history[i]);
  }
  // The middle item wants no logits: only items 0 and 2 write, in order.
  std::vector<ForwardItem> items = {{seqs[0].get(), step[0], true},
                                    {seqs[1].get(), step[1], false},
                                    {seqs[2].get(), step[2], true}};
  std::vector<float> logits(2 * V, NAN);
  auto st = b->forward(items, logits);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_LT(max_abs_diff(std::span(logits).first(V), alone[0]), 1e-3f);
  EXPECT_LT(max_abs_diff(std::span(logits).subspan(V, V), alone[2]), 1e-3f);
  EXPECT_EQ(seqs[1]->length(), 41);
  // The skipped item's cache is still right: its next step matches the lone run's.
  auto seq1_alone = b->new_sequence(128);
  run(*b, *seq1_alone, history[1]);
  run(*b, *seq1_alone, step[1]);
  auto next = tokens(1, V, 6);
  EXPECT_LT(max_abs_diff(run(*b, *seqs[1], next), run(*b, *seq1_alone, next)), 1e-3f);
}

TEST_P(ForwardPerArch, top_two_logits_are_usually_far_apart) {
  // Fixtures are scaled so greedy decoding is decided by margins, not float noise.
  auto b = load_fixture(spec_for(GetParam()), "peaky_" + GetParam());
  ASSERT_TRUE(b);
  auto seq = b->new_sequence(256);
  auto toks = tokens(200, b->config().n_vocab, 99);
  int wide = 0;
  for (int32_t t : toks) {
    auto logits = run(*b, *seq, std::span(&t, 1));
    std::partial_sort(logits.begin(), logits.begin() + 2, logits.end(), std::greater<>());
    if (logits[0] - logits[1] > 0.1f) ++wide;
  }
  EXPECT_GE(wide, 185);
}

INSTANTIATE_TEST_SUITE_P(Model, ForwardPerArch,
                         ::testing::Values("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"));

TEST(Forward, long_context_in_many_chunks_matches_decoding_from_the_prefill) {
  fixture::FixtureSpec spec;
  spec.rope_freqs = true;
  auto b = load_fixture(spec, "long_ctx");
  ASSERT_TRUE(b);
  const int32_t V = b->config().n_vocab;
  auto toks = tokens(2000, V, 11);
  auto a = b->new_sequence(2048);
  for (size_t at = 0; at < toks.size(); at += 512) {
    run(*b, *a, std::span(toks).subspan(at, std::min<size_t>(512, toks.size() - at)));
  }
  auto cont = tokens(40, V, 12);
  auto via_chunks = run(*b, *a, cont);
  auto c = b->new_sequence(2048);
  run(*b, *c, std::span(toks).first(1999));
  run(*b, *c, std::span(toks).last(1));
  auto via_two = run(*b, *c, cont);
  EXPECT_EQ(a->length(), 2040);
  EXPECT_LT(max_abs_diff(via_chunks, via_two), 1e-3f);
}

TEST(Forward, kv_memory_grows_with_use_and_returns_to_zero) {
  auto b = load_fixture(fixture::FixtureSpec{}, "kv_bytes");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->live_kv_bytes(), 0);
  {
    auto s1 = b->new_sequence(2048);
    auto s2 = b->new_sequence(2048);
    run(*b, *s1, tokens(10, b->config().n_vocab));
    const int64_t small = b->live_kv_bytes();
    EXPECT_GT(small, 0);
    // Far less than a full 2048-token cache.
    const int64_t per_token = 2LL * 2 * 2 * 16 * 2;  // K+V, layers, kv heads, head_dim, f16
    EXPECT_LT(small, per_token * 2048 / 2);
    run(*b, *s2, tokens(700, b->config().n_vocab));
    EXPECT_GE(b->live_kv_bytes(), small + per_token * 700);
  }
  EXPECT_EQ(b->live_kv_bytes(), 0);
}

TEST(Forward, overflowing_a_sequence_is_an_error_and_changes_nothing) {
  auto b = load_fixture(fixture::FixtureSpec{}, "overflow");
  ASSERT_TRUE(b);
  auto seq = b->new_sequence(8);
  auto toks = tokens(9, b->config().n_vocab);
  std::vector<float> logits(b->config().n_vocab);
  ForwardItem item{seq.get(), toks, true};
  auto st = b->forward(std::span(&item, 1), logits);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("needs 9 positions, the sequence holds 8"));
  EXPECT_EQ(seq->length(), 0);
}

TEST(Forward, out_of_range_token_and_small_logits_buffer_are_errors) {
  auto b = load_fixture(fixture::FixtureSpec{}, "bad_input");
  ASSERT_TRUE(b);
  auto seq = b->new_sequence(8);
  std::vector<int32_t> bad = {1, b->config().n_vocab};
  std::vector<float> logits(b->config().n_vocab);
  ForwardItem item{seq.get(), bad, true};
  auto st = b->forward(std::span(&item, 1), logits);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("out of range"));
  std::vector<int32_t> good = {1, 2};
  ForwardItem item2{seq.get(), good, true};
  std::vector<float> small(10);
  auto st2 = b->forward(std::span(&item2, 1), small);
  ASSERT_FALSE(st2.ok());
  EXPECT_THAT(st2.message(), HasSubstr("logits buffer"));
  EXPECT_EQ(seq->length(), 0);
}

}  // namespace
}  // namespace ember::model
