#include "server/text_codec.h"

#include "base/log.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace ember::server {
namespace {

// Used when the GGUF carries no template and ember has none built in for the architecture
// (e.g. fixture models): ChatML, as llama.cpp also falls back to.
constexpr const char* kFallbackChatML =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

class TokenizerDetokenizer final : public Detokenizer {
 public:
  explicit TokenizerDetokenizer(std::shared_ptr<const text::Tokenizer> tok)
      : tok_(std::move(tok)), detok_(*tok_) {}
  std::string push(int32_t id) override { return detok_.push(id); }
  std::string flush() override { return detok_.flush(); }

 private:
  std::shared_ptr<const text::Tokenizer> tok_;  // outlives detok_, which holds a reference
  text::IncrementalDetokenizer detok_;
};

class ModelTextCodec final : public TextCodec {
 public:
  ModelTextCodec(std::shared_ptr<const text::Tokenizer> tok, text::ChatTemplate tmpl)
      : tok_(std::move(tok)), tmpl_(std::move(tmpl)) {
    const auto& v = tok_->vocab();
    if (v.bos >= 0) bos_ = tok_->token_to_piece(v.bos, true);
    if (v.eos >= 0) eos_ = tok_->token_to_piece(v.eos, true);
  }

  Result<std::vector<int32_t>> encode_chat(const std::vector<Message>& messages) const override {
    std::vector<text::ChatMessage> conv;
    conv.reserve(messages.size());
    for (const Message& m : messages) conv.push_back({m.role, m.content});
    EMBER_TRY(std::string rendered, tmpl_.render(conv, true, bos_, eos_));
    // The template writes BOS and turn markers itself: parse them, add nothing.
    return tok_->encode(rendered, /*add_special=*/false, /*parse_special=*/true);
  }

  std::vector<int32_t> encode_prompt(std::string_view prompt) const override {
    return tok_->encode(prompt, /*add_special=*/true, /*parse_special=*/false);
  }

  std::unique_ptr<Detokenizer> detokenizer() const override {
    return std::make_unique<TokenizerDetokenizer>(tok_);
  }

  std::string token_text(int32_t id) const override { return tok_->token_to_piece(id, false); }

 private:
  std::shared_ptr<const text::Tokenizer> tok_;
  text::ChatTemplate tmpl_;
  std::string bos_, eos_;
};

}  // namespace

Result<std::unique_ptr<TextCodec>> make_text_codec(std::shared_ptr<const text::Tokenizer> tok,
                                                   const std::string& arch_name) {
  std::string source = tok->vocab().chat_template;
  if (source.empty()) {
    auto builtin = text::builtin_template(arch_name);
    if (builtin) {
      source = *builtin;
    } else {
      log::warn("the model has no chat template and ember has none built in for '{}': using ChatML",
                arch_name);
      source = kFallbackChatML;
    }
  }
  EMBER_TRY(text::ChatTemplate tmpl, text::ChatTemplate::parse(source));
  return std::unique_ptr<TextCodec>(new ModelTextCodec(std::move(tok), std::move(tmpl)));
}

}  // namespace ember::server
