// The shared text path of `ember run` and `ember serve` (text/text_codec.h): each behaviour is
// decided once, here.
#include <gtest/gtest.h>

#include "base/file.h"
#include "fixture/vocab_builder.h"
#include "text/text_codec.h"
#include "text/vocab_test_util.h"

namespace ember::text {
namespace {

using testing::id_of;

std::unique_ptr<TextCodec> codec_for(Vocab v, std::string system = "", std::string arch = "llama") {
  auto tok = Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.message();
  auto c = TextCodec::create(std::shared_ptr<const Tokenizer>(std::move(tok).value()),
                             {std::move(arch), std::move(system)});
  EXPECT_TRUE(c.ok()) << c.message();
  return c.ok() ? std::move(c).value() : nullptr;
}

Vocab fixture_vocab_without_template() {
  Vocab v = fixture::build_bpe_vocab({});
  v.chat_template.clear();
  return v;
}

TEST(TextCodec, no_template_falls_back_to_chatml) {
  auto c = codec_for(fixture_vocab_without_template());
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->template_is_fallback());
  auto text = c->render_chat({{"user", "hi"}});
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(*text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(TextCodec, default_system_prompt_applies_only_when_the_chat_has_none) {
  auto c = codec_for(fixture_vocab_without_template(), "Be brief.");
  ASSERT_NE(c, nullptr);
  auto with_default = c->render_chat({{"user", "hi"}});
  ASSERT_TRUE(with_default.ok());
  EXPECT_EQ(with_default->rfind("<|im_start|>system\nBe brief.<|im_end|>\n", 0), 0u)
      << *with_default;
  auto own = c->render_chat({{"system", "Be long."}, {"user", "hi"}});
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->find("Be brief."), std::string::npos) << *own;
  EXPECT_NE(own->find("Be long."), std::string::npos) << *own;
  // "developer" is OpenAI's newer name for the system role: it counts as one.
  auto dev = c->with_default_system({{"developer", "x"}, {"user", "hi"}});
  EXPECT_EQ(dev.size(), 2u);
}

TEST(TextCodec, empty_default_system_prompt_disables_it) {
  auto c = codec_for(fixture_vocab_without_template(), "");
  ASSERT_NE(c, nullptr);
  auto text = c->render_chat({{"user", "hi"}});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->find("system"), std::string::npos) << *text;
}

TEST(TextCodec, chat_and_raw_prompts_both_parse_special_tokens) {
  auto c = codec_for(fixture_vocab_without_template());
  ASSERT_NE(c, nullptr);
  const auto& tok = c->tokenizer();
  const int32_t im_end = id_of(tok, "<|im_end|>");
  auto raw = c->encode_prompt("a<|im_end|>b");
  EXPECT_NE(std::find(raw.begin(), raw.end(), im_end), raw.end());
  auto chat = c->encode_chat({{"user", "a"}});
  ASSERT_TRUE(chat.ok());
  EXPECT_NE(std::find(chat->begin(), chat->end(), im_end), chat->end());
}

TEST(TextCodec, raw_prompt_gets_bos_as_the_vocabulary_asks) {
  Vocab v = fixture_vocab_without_template();
  v.add_bos = true;
  const int32_t bos = v.bos;
  auto c = codec_for(std::move(v));
  ASSERT_NE(c, nullptr);
  auto ids = c->encode_prompt("hello");
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), bos);
}

// A template whose turns end with a control token the vocabulary does not list as EOG: the
// codec adds it, so a chat ends where the template says a turn ends.
TEST(TextCodec, end_of_generation_includes_the_templates_end_of_turn_token) {
  Vocab v = testing::tiny_bpe({"<|turn_end|>", "<|other|>"}, {});
  const auto turn_end = static_cast<int32_t>(v.tokens.size() - 2);
  v.types[static_cast<size_t>(turn_end)] = TokenType::Control;
  v.types.back() = TokenType::Control;
  v.eog = {static_cast<int32_t>(v.tokens.size() - 1)};
  v.chat_template =
      "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '<|turn_end|>\\n' }}"
      "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";
  auto c = codec_for(std::move(v));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->eog_tokens(), (std::vector<int32_t>{turn_end, turn_end + 1}));
}

TEST(TextCodec, a_template_with_no_end_of_turn_token_adds_nothing) {
  Vocab v = testing::tiny_bpe({"<|x|>"}, {});
  v.types.back() = TokenType::Control;
  v.chat_template =
      "{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n\\n' }}{% endfor %}"
      "{% if add_generation_prompt %}assistant: {% endif %}";
  auto c = codec_for(std::move(v));
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->eog_tokens().empty());
}

// Gemma 2's template (tests/golden/templates/gemma2.jinja) raises on a system turn. The codec
// folds system text into the next user turn instead, so the default system prompt (and a
// client's) does not turn every chat into an error.
TEST(TextCodec, a_template_without_a_system_role_gets_system_text_in_the_first_user_turn) {
  Vocab v = fixture::build_spm_vocab({});
  auto source = read_file(std::string(EMBER_SOURCE_DIR) + "/tests/golden/templates/gemma2.jinja");
  ASSERT_TRUE(source.ok()) << source.message();
  v.chat_template = *source;
  auto c = codec_for(v, "Be brief.", "gemma2");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->folds_system());
  auto text = c->render_chat({{"user", "hi"}, {"assistant", "hello"}, {"user", "again"}});
  ASSERT_TRUE(text.ok()) << text.message();
  EXPECT_EQ(*text,
            "<bos><start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n<start_of_turn>model\nhello"
            "<end_of_turn>\n<start_of_turn>user\nagain<end_of_turn>\n<start_of_turn>model\n");
  auto own = c->render_chat({{"system", "Answer in French."}, {"user", "hi"}});
  ASSERT_TRUE(own.ok()) << own.message();
  EXPECT_NE(own->find("user\nAnswer in French.\n\nhi<end_of_turn>"), std::string::npos) << *own;
  EXPECT_EQ(own->find("Be brief."), std::string::npos) << *own;
  // The tool path (Hugging Face-shaped messages) folds the same way.
  nlohmann::ordered_json msgs = {{{"role", "system"}, {"content", "Answer in French."}},
                                 {{"role", "user"}, {"content", "hi"}}};
  auto ids = c->encode_chat_with_tools(msgs, nullptr);
  ASSERT_TRUE(ids.ok()) << ids.message();
  EXPECT_EQ(*ids, c->tokenizer().encode(*own, /*add_special=*/false, /*parse_special=*/true));
  // A template that has a system role keeps it.
  auto chatml = codec_for(fixture_vocab_without_template(), "Be brief.");
  ASSERT_NE(chatml, nullptr);
  EXPECT_FALSE(chatml->folds_system());
}

}  // namespace
}  // namespace ember::text
