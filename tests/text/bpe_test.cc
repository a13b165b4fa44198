// Byte-level BPE: merges by rank, llama3's ignore_merges, special tokens, byte fallback and
// exact round trips. Expected ids below are worked out by hand from the tiny vocabularies.
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "text/vocab_test_util.h"

namespace ember::text {
namespace {

using testing::id_of;
using testing::make;
using testing::tiny_bpe;
using Ids = std::vector<int32_t>;

int32_t byte_id(char c) {
  return static_cast<uint8_t>(c);
}  // tiny_bpe puts byte b at id b

TEST(Bpe, lower_ranked_merge_applies_first) {
  auto a = make(tiny_bpe({"lo", "ll"}, {"l o", "l l"}));
  EXPECT_EQ(a->encode("llo", false, false), (Ids{byte_id('l'), 256}));  // l + lo
  auto b = make(tiny_bpe({"lo", "ll"}, {"l l", "l o"}));
  EXPECT_EQ(b->encode("llo", false, false), (Ids{257, byte_id('o')}));  // ll + o
}

TEST(Bpe, equal_ranks_merge_leftmost_first) {
  auto t = make(tiny_bpe({"aa"}, {"a a"}));
  EXPECT_EQ(t->encode("aaa", false, false), (Ids{256, byte_id('a')}));
  EXPECT_EQ(t->encode("aaaa", false, false), (Ids{256, 256}));
}

TEST(Bpe, merges_chain_into_longer_tokens_with_the_space_as_G) {
  // " hi" is one gpt-2 word, byte-encoded as "Ġhi".
  auto t = make(tiny_bpe({"Ġh", "Ġhi"}, {"Ġ h", "Ġh i"}));
  EXPECT_EQ(t->encode("hi hi", false, false), (Ids{byte_id('h'), byte_id('i'), 257}));
  EXPECT_EQ(t->decode(Ids{257}), " hi");
}

TEST(Bpe, llama3_emits_a_word_that_is_a_token_without_merging) {
  auto l3 = make(tiny_bpe({"abc"}, {}, "llama3"));
  EXPECT_EQ(l3->encode("abc", false, false), (Ids{256}));
  auto g2 = make(tiny_bpe({"abc"}, {}, "gpt-2"));
  EXPECT_EQ(g2->encode("abc", false, false), (Ids{byte_id('a'), byte_id('b'), byte_id('c')}));
}

TEST(Bpe, merge_result_missing_from_vocab_falls_back_to_byte_tokens) {
  auto t = make(tiny_bpe({}, {"x y"}));
  EXPECT_EQ(t->encode("xy", false, false), (Ids{byte_id('x'), byte_id('y')}));
}

TEST(Bpe, invalid_utf8_is_encoded_as_replacement_characters) {
  auto t = make(tiny_bpe({}, {}));
  // 0xFF alone -> U+FFFD = EF BF BD, each byte its own token here
  EXPECT_EQ(t->encode("\xFF", false, false), (Ids{0xEF, 0xBF, 0xBD}));
}

TEST(Bpe, special_tokens_are_split_out_only_when_parse_special) {
  const auto& t = testing::fixture_bpe();
  const int32_t eot = t.vocab().eot;
  const auto parsed = t.encode("hi<|eot_id|>there", false, true);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), eot), 1);
  EXPECT_EQ(t.decode(parsed, true), "hi<|eot_id|>there");
  const auto literal = t.encode("hi<|eot_id|>there", false, false);
  EXPECT_EQ(std::count(literal.begin(), literal.end(), eot), 0);
  EXPECT_EQ(t.decode(literal), "hi<|eot_id|>there");
}

TEST(Bpe, longer_special_token_wins_over_a_shorter_one_inside_it) {
  auto v = tiny_bpe({"<a>", "<a><b>"}, {});
  v.types[256] = TokenType::Control;
  v.types[257] = TokenType::Control;
  auto t = make(std::move(v));
  EXPECT_EQ(t->encode("x<a><b><a>", false, true), (Ids{byte_id('x'), 257, 256}));
}

TEST(Bpe, user_defined_tokens_are_split_out_even_without_parse_special) {
  auto v = tiny_bpe({"<tag>"}, {});
  v.types[256] = TokenType::UserDefined;
  auto t = make(std::move(v));
  EXPECT_EQ(t->encode("a<tag>b", false, false), (Ids{byte_id('a'), 256, byte_id('b')}));
  EXPECT_EQ(t->token_to_piece(256), "<tag>");
}

TEST(Bpe, add_special_prepends_bos_and_appends_eos_when_the_vocab_asks) {
  auto v = fixture::build_bpe_vocab({});
  v.add_eos = true;
  auto t = make(v);
  const auto ids = t->encode("Hello", true, false);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), v.bos);
  EXPECT_EQ(ids.back(), v.eos);
  EXPECT_EQ(t->encode("Hello", false, false).size(), ids.size() - 2);
}

TEST(Bpe, control_tokens_render_only_when_asked) {
  const auto& t = testing::fixture_bpe();
  EXPECT_EQ(t.token_to_piece(t.vocab().bos), "");
  EXPECT_EQ(t.token_to_piece(t.vocab().bos, true), "<|begin_of_text|>");
  EXPECT_EQ(t.token_to_piece(-1), "");
  EXPECT_EQ(t.token_to_piece(t.n_vocab()), "");
}

TEST(Bpe, fixture_vocab_compresses_common_english) {
  const auto& t = testing::fixture_bpe();
  const std::string s = "The quick brown fox jumps over the lazy dog.";
  const auto ids = t.encode(s, false, false);
  EXPECT_LT(ids.size(), s.size() * 2 / 3);
  EXPECT_EQ(ids[0], id_of(t, "The"));
}

TEST(Bpe, decode_of_encode_is_the_identity_on_tricky_strings) {
  for (const char* pre : {"llama3", "qwen2", "gpt-2", "default"}) {
    auto t = make(fixture::build_bpe_vocab({.n_merges = 300, .pre = pre}));
    for (const auto& s : testing::tricky_strings()) {
      EXPECT_EQ(t->decode(t->encode(s, false, false)), s) << pre << ": " << s;
      EXPECT_EQ(t->decode(t->encode(s, true, true)), s) << pre << ": " << s;
    }
  }
}

TEST(Bpe, eog_covers_eos_eot_and_im_end) {
  const auto& t = testing::fixture_bpe();
  EXPECT_TRUE(t.is_eog(t.vocab().eos));
  EXPECT_TRUE(t.is_eog(t.vocab().eot));
  EXPECT_TRUE(t.is_eog(id_of(t, "<|im_end|>")));
  EXPECT_FALSE(t.is_eog(t.vocab().bos));
  EXPECT_FALSE(t.is_eog(-1));
}

}  // namespace
}  // namespace ember::text
