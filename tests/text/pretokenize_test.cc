#include "text/pretokenize.h"

#include <gtest/gtest.h>

#include "text/unicode.h"
#include "text/vocab_test_util.h"

namespace ember::text {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view pre, std::string_view text) {
  auto p = PreTokenizer::create(pre);
  EXPECT_TRUE(p.ok()) << p.message();
  Pieces out;
  for (auto s : p->split(text)) out.emplace_back(s);
  return out;
}

TEST(Pretokenize, llama3_attaches_one_leading_space_to_a_word) {
  EXPECT_EQ(split("llama3", "Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(split("llama3", "naïve café Привет"), (Pieces{"naïve", " café", " Привет"}));
}

TEST(Pretokenize, llama3_splits_digits_in_groups_of_three) {
  EXPECT_EQ(split("llama3", "1234567 abc12345"), (Pieces{"123", "456", "7", " abc", "123", "45"}));
}

TEST(Pretokenize, llama3_contractions_are_case_insensitive) {
  EXPECT_EQ(split("llama3", "I'M you'Re they'LL we'd"),
            (Pieces{"I", "'M", " you", "'Re", " they", "'LL", " we", "'d"}));
}

TEST(Pretokenize, llama3_whitespace_run_leaves_its_last_space_to_the_next_word) {
  EXPECT_EQ(split("llama3", "a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(split("llama3", "a  "), (Pieces{"a", "  "}));
  EXPECT_EQ(split("llama3", "  leading"), (Pieces{" ", " leading"}));
}

TEST(Pretokenize, llama3_newlines_end_a_whitespace_piece) {
  EXPECT_EQ(split("llama3", "a \n\n b"), (Pieces{"a", " \n\n", " b"}));
  EXPECT_EQ(split("llama3", "line\r\n  next"), (Pieces{"line", "\r\n", " ", " next"}));
  EXPECT_EQ(split("llama3", "x=1;\n\ty"), (Pieces{"x", "=", "1", ";\n", "\ty"}));
}

TEST(Pretokenize, llama3_splits_code_at_punctuation) {
  EXPECT_EQ(split("llama3", "for (int i = 0; i < n; ++i) {"),
            (Pieces{"for", " (", "int", " i", " =", " ", "0", ";", " i", " <", " n", ";", " ++",
                    "i", ")", " {"}));
}

TEST(Pretokenize, llama3_keeps_emoji_with_punctuation_and_cjk_as_letters) {
  EXPECT_EQ(split("llama3", "hi 😀😀!"), (Pieces{"hi", " 😀😀!"}));
  EXPECT_EQ(split("llama3", "中文 文本 日本語のテキスト"),
            (Pieces{"中文", " 文本", " 日本語のテキスト"}));
}

TEST(Pretokenize, qwen2_splits_every_digit) {
  EXPECT_EQ(split("qwen2", "12345 ab"), (Pieces{"1", "2", "3", "4", "5", " ab"}));
  EXPECT_EQ(split("qwen2", "I'M ok"), (Pieces{"I", "'M", " ok"}));
}

TEST(Pretokenize, gpt2_contractions_are_case_sensitive) {
  EXPECT_EQ(split("gpt-2", "I'M you're"), (Pieces{"I", "'", "M", " you", "'re"}));
}

TEST(Pretokenize, gpt2_keeps_unmatched_text_as_its_own_piece) {
  EXPECT_EQ(split("gpt-2", "a\nb"), (Pieces{"a", "\n", "b"}));
  EXPECT_EQ(split("gpt-2", "a  b  "), (Pieces{"a", " ", " b", "  "}));
}

TEST(Pretokenize, default_applies_its_regexes_in_stages) {
  EXPECT_EQ(split("default", "Hello, world! 12345"),
            (Pieces{"Hello", ",", " world", "!", " ", "123", "45"}));
  EXPECT_EQ(split("default", "x+=y; 1234567"),
            (Pieces{"x", "+=", "y", ";", " ", "123", "456", "7"}));
}

TEST(Pretokenize, an_unknown_name_is_refused_naming_it_and_no_name_is_the_default) {
  EXPECT_FALSE(PreTokenizer::is_known("gpt-4o"));
  auto r = PreTokenizer::create("gpt-4o");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("pre-tokenizer 'gpt-4o' (tokenizer.ggml.pre) is not supported"),
            std::string::npos)
      << r.message();
  EXPECT_NE(r.message().find("qwen2"), std::string::npos) << r.message();
  EXPECT_EQ(PreTokenizer::regexes_for(""), PreTokenizer::regexes_for("default"));
  EXPECT_EQ(split("", "x+=y"), (Pieces{"x", "+=", "y"}));
}

TEST(Pretokenize, pieces_concatenate_back_to_the_input) {
  for (const char* pre : {"llama3", "qwen2", "gpt-2", "default"}) {
    for (const auto& s : testing::tricky_strings()) {
      const std::string clean = sanitize_utf8(s);
      std::string joined;
      for (const auto& p : split(pre, clean)) {
        EXPECT_FALSE(p.empty());
        joined += p;
      }
      EXPECT_EQ(joined, clean) << pre;
    }
  }
}

TEST(Pretokenize, a_huge_whitespace_run_is_split_without_failing) {
  const std::string s = "a" + std::string(200000, ' ') + "b";
  const auto pieces = split("llama3", s);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[1].size(), 199999u);
  EXPECT_EQ(pieces[2], " b");
}

}  // namespace
}  // namespace ember::text
