// SentencePiece-style tokenization on the real Gemma 3 vocabulary. Expected ids were checked
// against the vocabulary's pieces (read with the python `gguf` package) and an independent
// Python implementation of llama.cpp's SPM algorithm.
#include <gtest/gtest.h>

#include "text/tokenizer.h"
#include "text/vocab_test_util.h"

namespace ember::text {
namespace {

using testing::gemma;
using Ids = std::vector<int32_t>;

TEST(Spm, gemma_hello_world_matches_the_reference_ids) {
  EXPECT_EQ(gemma().encode("Hello world", true, false), (Ids{2, 9259, 1902}));
  EXPECT_EQ(gemma().token_to_piece(1902), " world");
}

TEST(Spm, gemma_space_runs_are_user_defined_tokens) {
  // "  " (id 138) is a user-defined token, split out before the merges.
  EXPECT_EQ(gemma().encode("Hello  world", true, false), (Ids{2, 9259, 138, 12392}));
  EXPECT_EQ(gemma().encode(" leading and trailing  ", true, false),
            (Ids{2, 5830, 532, 45330, 138}));
}

TEST(Spm, gemma_chat_turn_markers_parse_only_when_parse_special) {
  EXPECT_EQ(gemma().encode("<start_of_turn>user\nHi there!<end_of_turn>\n", true, true),
            (Ids{2, 105, 2364, 107, 10979, 993, 236888, 106, 107}));
  EXPECT_EQ(gemma().encode("<start_of_turn>user", true, false),
            (Ids{2, 236820, 3041, 236779, 1340, 236779, 887, 236813, 2364}));
}

TEST(Spm, gemma_splits_digits_and_handles_accents_emoji_and_cjk) {
  EXPECT_EQ(gemma().encode("12345 3.14159", false, false),
            (Ids{236770, 236778, 236800, 236812, 236810, 236743, 236800, 236761, 236770, 236812,
                 236770, 236810, 236819}));
  EXPECT_EQ(gemma().encode("naïve café 😀 日本語", false, false),
            (Ids{1789, 238527, 560, 33443, 163543, 33375, 238582}));
  EXPECT_EQ(gemma().encode("def f(x):\n\treturn x * 2", false, false),
            (Ids{2063, 517, 236769, 236781, 1473, 107, 255968, 2060, 1123, 808, 236743, 236778}));
}

TEST(Spm, gemma_unknown_characters_fall_back_to_byte_tokens) {
  // U+FFFF has no piece: its three bytes become <0xEF> <0xBF> <0xBF> (ids 238 + byte).
  EXPECT_EQ(gemma().encode("\x01\xEF\xBF\xBF", false, false), (Ids{249732, 477, 429, 429}));
  EXPECT_EQ(gemma().token_to_piece(238 + 0xEF), "\xEF");
}

TEST(Spm, gemma_vocab_facts_match_the_file) {
  const Vocab& v = gemma().vocab();
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.tokens.size(), 262144u);
  EXPECT_EQ(v.bos, 2);
  EXPECT_EQ(v.eos, 1);
  EXPECT_EQ(v.unk, 3);
  EXPECT_EQ(v.pad, 0);
  EXPECT_EQ(v.eot, 106);  // <end_of_turn>, found by its text
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(v.eog, (Ids{1, 106}));
}

TEST(Spm, gemma_decode_of_encode_is_the_identity_on_tricky_strings) {
  for (const auto& s : testing::tricky_strings()) {
    EXPECT_EQ(gemma().decode(gemma().encode(s, true, false)), s) << s;
  }
}

TEST(Spm, fixture_vocab_merges_learned_words_and_round_trips) {
  const auto& t = testing::fixture_spm();
  const auto ids = t.encode("The quick brown fox", false, false);
  EXPECT_LE(ids.size(), 12u);
  EXPECT_EQ(ids[0], testing::id_of(t, "The"));
  for (const auto& s : testing::tricky_strings()) {
    EXPECT_EQ(t.decode(t.encode(s, true, true)), s) << s;
  }
}

TEST(Spm, space_prefix_is_added_at_the_start_and_after_specials_and_stripped_by_decode) {
  auto v = fixture::build_spm_vocab({});
  v.add_space_prefix = true;
  auto t = testing::make(v);
  const int32_t sow = testing::id_of(*t,
                                     "\xE2\x96\x81"
                                     "The");
  ASSERT_GE(sow, 0);
  EXPECT_EQ(t->encode("The", false, false), (Ids{sow}));
  const auto ids = t->encode("<start_of_turn>The", false, true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[1], sow);
  EXPECT_EQ(t->decode(t->encode("The end", false, false)), "The end");
}

}  // namespace
}  // namespace ember::text
