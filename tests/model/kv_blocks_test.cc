// KV in blocks and what the prefix cache relies on: a position's KV and logits do not depend on
// how tokens were batched (one pass, chunks of any size, alongside other sequences), so a
// sequence built on another's full blocks continues bit-identically to one that computed them
// itself — on every architecture, across gemma3's sliding window, and for every weight type the
// fixtures write. Equality here is exact (EXPECT_EQ on floats), not a tolerance.
#include <gtest/gtest.h>

#include <cstring>

#include "model/fingerprint.h"
#include "model/model_test_util.h"
#include "tensor/quant.h"

namespace ember::model {
namespace {

using namespace ember::model::testing;

struct Case {
  std::string name;
  fixture::FixtureSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](std::string name, std::string arch, tensor::DType type, int n_embd) {
    fixture::FixtureSpec s;
    s.arch = arch;
    s.type = type;
    s.n_embd = n_embd;
    s.n_ff = 2 * n_embd;
    if (arch == "gemma3") s.n_layer = 6;  // five sliding-window layers (window 128), one global
    out.push_back({std::move(name), s});
  };
  add("llama_f32", "llama", tensor::DType::F32, 64);
  add("qwen3_f32", "qwen3", tensor::DType::F32, 64);
  add("gemma3_f32", "gemma3", tensor::DType::F32, 64);
  add("llama_f16", "llama", tensor::DType::F16, 64);
  add("llama_q8_0", "llama", tensor::DType::Q8_0, 64);
  add("llama_q4_k", "llama", tensor::DType::Q4_K, 256);  // K types need 256-wide rows
  add("llama_q6_k", "llama", tensor::DType::Q6_K, 256);
  add("gemma3_q4_k", "gemma3", tensor::DType::Q4_K, 256);
  return out;
}

class KvBlocks : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    b_ = load_fixture(GetParam().spec, "kvb_" + GetParam().name);
    ASSERT_TRUE(b_);
  }
  std::unique_ptr<Backend> b_;
};

// Logits after `toks`, fed in pieces of the given sizes (the rest in the last piece).
std::vector<float> fed_in_pieces(Backend& b, std::span<const int32_t> toks,
                                 std::vector<size_t> pieces) {
  auto seq = b.new_sequence(1024);
  std::vector<float> last;
  size_t at = 0;
  for (size_t n : pieces) {
    if (at >= toks.size()) break;
    n = std::min(n, toks.size() - at);
    last = run(b, *seq, toks.subspan(at, n));
    at += n;
  }
  if (at < toks.size()) last = run(b, *seq, toks.subspan(at));
  return last;
}

TEST_P(KvBlocks, logits_do_not_depend_on_how_tokens_are_batched) {
  auto toks = tokens(300, b_->config().n_vocab, 3);  // crosses gemma3's 128-token window
  const auto whole = fed_in_pieces(*b_, toks, {300});
  EXPECT_EQ(fed_in_pieces(*b_, toks, {1, 1, 1, 5, 300}), whole);
  EXPECT_EQ(fed_in_pieces(*b_, toks, {16, 16, 16, 300}), whole);
  EXPECT_EQ(fed_in_pieces(*b_, toks, {17, 100, 3, 299}), whole);
  EXPECT_EQ(fed_in_pieces(*b_, toks, {299, 1}), whole);
  std::vector<size_t> ones(300, 1);
  EXPECT_EQ(fed_in_pieces(*b_, toks, ones), whole);

  // The same tokens in a batch with two other sequences (decode rows and a prefill chunk).
  auto s1 = b_->new_sequence(1024), s2 = b_->new_sequence(1024), s3 = b_->new_sequence(1024);
  auto other = tokens(40, b_->config().n_vocab, 9);
  run(*b_, *s2, other);
  run(*b_, *s1, std::span(toks).first(200));
  const int32_t V = b_->config().n_vocab;
  std::vector<float> logits(3 * size_t(V));
  ForwardItem items[3] = {{s2.get(), std::span(other).first(1), true},
                          {s1.get(), std::span(toks).subspan(200), true},
                          {s3.get(), std::span(other).first(7), true}};
  ASSERT_TRUE(b_->forward(items, logits).ok());
  EXPECT_TRUE(std::equal(whole.begin(), whole.end(), logits.begin() + V));
}

// Attention cuts a step's work by the threads (a token, a chunk of its range, a KV head, a slice
// of its group: cpu_model.cc) and reads long ranges in fixed chunks; none of that may change a
// bit. 600 positions span three chunks; 1, 2 and 3 threads cut a decode step three ways.
TEST_P(KvBlocks, logits_do_not_depend_on_the_thread_count) {
  auto toks = tokens(600, b_->config().n_vocab, 4);
  const auto whole = fed_in_pieces(*b_, toks, {600});
  EXPECT_EQ(fed_in_pieces(*b_, toks, {599, 1}), whole);
  for (int32_t threads : {1, 3}) {
    auto other = load_fixture(GetParam().spec, "kvb_" + GetParam().name, {.n_threads = threads});
    ASSERT_TRUE(other);
    EXPECT_EQ(fed_in_pieces(*other, toks, {600}), whole) << threads << " threads";
    EXPECT_EQ(fed_in_pieces(*other, toks, {598, 1, 1}), whole) << threads << " threads";
  }
}

TEST_P(KvBlocks, sequence_on_reused_blocks_continues_bit_identically) {
  const int32_t B = b_->kv_layout().block_tokens;
  auto toks = tokens(330, b_->config().n_vocab, 5);
  auto donor = b_->new_sequence(1024);
  run(*b_, *donor, toks);
  ASSERT_EQ(donor->length(), 330);
  const auto want = fed_in_pieces(*b_, toks, {330});
  for (int32_t n_blocks : {1, 2, 8, 20}) {  // 320 positions: far past gemma3's window
    std::vector<KvBlockRef> prefix;
    for (int32_t i = 0; i < n_blocks; ++i) prefix.push_back(donor->block(i));
    std::vector<std::vector<uint8_t>> before;
    for (auto& p : prefix) before.push_back(flat_bytes(*p));
    auto seq = b_->new_sequence(1024, prefix);
    ASSERT_EQ(seq->length(), n_blocks * B);
    auto got = run(*b_, *seq, std::span(toks).subspan(size_t(n_blocks * B)));
    EXPECT_EQ(got, want) << n_blocks << " reused blocks";
    for (size_t i = 0; i < prefix.size(); ++i) {  // shared blocks were only read
      EXPECT_EQ(before[i], flat_bytes(*prefix[i]));
    }
  }
}

TEST_P(KvBlocks, blocks_rebuilt_from_bytes_serve_like_the_originals) {
  const int32_t B = b_->kv_layout().block_tokens;
  auto toks = tokens(5 * B + 3, b_->config().n_vocab, 8);
  auto donor = b_->new_sequence(512);
  const auto want = run(*b_, *donor, toks);
  std::vector<KvBlockRef> copies;
  for (int32_t i = 0; i < 5; ++i) {
    auto c = b_->kv_block_from_bytes(flat_bytes(*donor->block(i)));
    ASSERT_TRUE(c.ok()) << c.message();
    copies.push_back(*c);
  }
  auto seq = b_->new_sequence(512, copies);
  EXPECT_EQ(run(*b_, *seq, std::span(toks).subspan(size_t(5 * B))), want);
  std::vector<uint8_t> short_bytes(10);
  auto bad = b_->kv_block_from_bytes(short_bytes);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("10 bytes"), std::string::npos) << bad.message();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KvBlocks, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(KvLayout, fingerprint_and_context_key_change_with_the_model) {
  fixture::FixtureSpec a;
  fixture::FixtureSpec other_weights = a;
  other_weights.seed = 2;
  fixture::FixtureSpec other_type = a;
  other_type.type = tensor::DType::F16;
  auto ba = load_fixture(a, "fp_a");
  auto ba2 = load_fixture(a, "fp_a2");
  auto bw = load_fixture(other_weights, "fp_w");
  auto bt = load_fixture(other_type, "fp_t");
  ASSERT_TRUE(ba && ba2 && bw && bt);
  EXPECT_EQ(ba->kv_layout().model_fingerprint, ba2->kv_layout().model_fingerprint);
  EXPECT_EQ(ba->kv_layout().context_key, ba2->kv_layout().context_key);
  EXPECT_NE(ba->kv_layout().model_fingerprint, bw->kv_layout().model_fingerprint);
  EXPECT_NE(ba->kv_layout().model_fingerprint, bt->kv_layout().model_fingerprint);
  // Rope settings are part of the context even for the same fingerprint.
  KvLayout l = ba->kv_layout();
  ModelConfig c = ba->config();
  const uint64_t base = kv_context_key(l, c);
  c.rope_base *= 2;
  EXPECT_NE(kv_context_key(l, c), base);
  c = ba->config();
  l.dtype = "f32";
  EXPECT_NE(kv_context_key(l, c), base);
}

// The cache's type. f16 holds a position in half the bytes of f32 and names itself in the
// layout, so neither backend takes the other's blocks (or warm state: the context key and the
// dtype differ). What it stores is each key and value rounded to half: layer 0's rows, which no
// earlier attention touches, are exactly the f32 cache's rows rounded. Logits then move only
// by that rounding.
TEST(KvType, f16_blocks_are_the_f32_rows_rounded_in_half_the_bytes_and_not_interchangeable) {
  fixture::FixtureSpec s;
  auto h = load_fixture(s, "kvt_h", {.kv_type = KvType::F16});
  auto f = load_fixture(s, "kvt_f", {.kv_type = KvType::F32});
  ASSERT_TRUE(h && f);
  EXPECT_EQ(h->kv_layout().dtype, "f16");
  EXPECT_EQ(f->kv_layout().dtype, "f32");
  EXPECT_EQ(2 * h->kv_layout().block_bytes, f->kv_layout().block_bytes);
  EXPECT_EQ(h->kv_layout().model_fingerprint, f->kv_layout().model_fingerprint);
  EXPECT_NE(h->kv_layout().context_key, f->kv_layout().context_key);

  const auto toks = tokens(40, h->config().n_vocab);
  auto sh = h->new_sequence(64), sf = f->new_sequence(64);
  const auto lh = run(*h, *sh, toks), lf = run(*f, *sf, toks);
  EXPECT_EQ(2 * sh->kv_bytes(), sf->kv_bytes());
  EXPECT_EQ(2 * h->live_kv_bytes(), f->live_kv_bytes());
  EXPECT_GT(max_abs_diff(lh, lf), 0.f) << "the f16 cache rounds";
  EXPECT_LT(max_abs_diff(lh, lf), 0.05f);

  auto flat = [](const KvBlockRef& b) {
    std::vector<uint8_t> out;
    for (auto piece : b->bytes()) out.insert(out.end(), piece.begin(), piece.end());
    return out;
  };
  const auto bh = flat(sh->block(0)), bf = flat(sf->block(0));
  ASSERT_EQ(static_cast<int64_t>(bh.size()), h->kv_layout().block_bytes);
  const size_t layer0 = bh.size() / static_cast<size_t>(h->config().n_layer) / 2;  // halves
  for (size_t i = 0; i < layer0; ++i) {
    float x;
    uint16_t want;
    std::memcpy(&x, bf.data() + 4 * i, 4);
    std::memcpy(&want, bh.data() + 2 * i, 2);
    ASSERT_EQ(tensor::f32_to_fp16(x), want) << "layer 0 element " << i;
  }
  auto cross = h->kv_block_from_bytes(bf);
  ASSERT_FALSE(cross.ok());
  EXPECT_NE(cross.message().find("bytes"), std::string::npos) << cross.message();
  EXPECT_FALSE(f->kv_block_from_bytes(bh).ok());
}

}  // namespace
}  // namespace ember::model
