// The incremental detokenizer emits only whole UTF-8 characters, whatever the token split.
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/vocab_test_util.h"

namespace ember::text {
namespace {

TEST(Detok, emoji_split_across_byte_tokens_comes_out_whole) {
  const auto& t = testing::gemma();
  IncrementalDetokenizer d(t);
  // 😀 = F0 9F 98 80 as Gemma byte tokens (<0xNN> is id 238 + NN)
  EXPECT_EQ(d.push(238 + 0xF0), "");
  EXPECT_EQ(d.push(238 + 0x9F), "");
  EXPECT_EQ(d.push(238 + 0x98), "");
  EXPECT_EQ(d.push(238 + 0x80), "\xF0\x9F\x98\x80");
  EXPECT_EQ(d.flush(), "");
}

TEST(Detok, flush_replaces_an_unfinished_character) {
  IncrementalDetokenizer d(testing::gemma());
  EXPECT_EQ(d.push(9259), "Hello");
  EXPECT_EQ(d.push(238 + 0xE6), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
}

TEST(Detok, a_byte_that_can_never_be_valid_is_replaced_at_once) {
  IncrementalDetokenizer d(testing::gemma());
  EXPECT_EQ(d.push(238 + 0x80), "\xEF\xBF\xBD");  // a lone continuation byte
  EXPECT_EQ(d.push(238 + 0x41), "A");
}

TEST(Detok, output_is_valid_utf8_at_every_step_and_concatenates_to_decode) {
  for (const Tokenizer* t : {&testing::gemma(), &testing::fixture_bpe(), &testing::fixture_spm()}) {
    for (const auto& s : testing::tricky_strings()) {
      const auto ids = t->encode(s, false, false);
      IncrementalDetokenizer d(*t);
      std::string all;
      for (int32_t id : ids) {
        const std::string piece = d.push(id);
        EXPECT_TRUE(is_valid_utf8(piece)) << s;
        all += piece;
      }
      all += d.flush();
      EXPECT_EQ(all, t->decode(ids)) << s;
    }
  }
}

TEST(Detok, fixture_bpe_emoji_bytes_arrive_one_token_at_a_time) {
  const auto& t = testing::fixture_bpe();
  const auto ids = t.encode("\xF0\x9F\x8E\x89", false, false);  // 🎉: no merges cover it
  ASSERT_EQ(ids.size(), 4u);
  IncrementalDetokenizer d(t);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = d.push(ids[i]);
    EXPECT_EQ(piece.empty(), i + 1 < ids.size());
    out += piece;
  }
  EXPECT_EQ(out, "\xF0\x9F\x8E\x89");
}

TEST(Detok, control_tokens_produce_no_text) {
  const auto& t = testing::fixture_bpe();
  IncrementalDetokenizer d(t);
  EXPECT_EQ(d.push(t.vocab().eot), "");
  EXPECT_EQ(d.flush(), "");
}

}  // namespace
}  // namespace ember::text
