#include "server/text_codec.h"

#include <map>
#include <mutex>

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

// A message as chat templates see it (Hugging Face's shape): tool calls with their arguments
// as an object when they are JSON (templates print them with tojson), tool results with their
// call id.
nlohmann::ordered_json message_json(const Message& m) {
  nlohmann::ordered_json j = {{"role", m.role}};
  j["content"] = m.content.empty() && !m.tool_calls.empty() ? nlohmann::ordered_json(nullptr)
                                                            : nlohmann::ordered_json(m.content);
  if (!m.tool_calls.empty()) {
    auto calls = nlohmann::ordered_json::array();
    for (const ToolCallIn& c : m.tool_calls) {
      auto args = nlohmann::ordered_json::parse(c.arguments, nullptr, false);
      if (args.is_discarded()) args = c.arguments;
      calls.push_back({{"id", c.id},
                       {"type", "function"},
                       {"function", {{"name", c.name}, {"arguments", std::move(args)}}}});
    }
    j["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.name.empty()) j["name"] = m.name;
  return j;
}

class ModelTextCodec final : public TextCodec {
 public:
  ModelTextCodec(std::shared_ptr<const text::Tokenizer> tok, text::ChatTemplate tmpl,
                 text::ChatTemplate tool_tmpl)
      : tok_(std::move(tok)), tmpl_(std::move(tmpl)), tool_tmpl_(std::move(tool_tmpl)) {
    const auto& v = tok_->vocab();
    if (v.bos >= 0) bos_ = tok_->token_to_piece(v.bos, true);
    if (v.eos >= 0) eos_ = tok_->token_to_piece(v.eos, true);
    format_ = text::tool_format_for_template(tool_tmpl_.source());
  }

  Result<std::vector<int32_t>> encode_chat(const std::vector<Message>& messages,
                                           const nlohmann::ordered_json& tools) const override {
    bool tool_history = false;
    for (const Message& m : messages) {
      tool_history = tool_history || !m.tool_calls.empty() || m.role == "tool";
    }
    std::string rendered;
    if (tools.is_null() && !tool_history) {
      std::vector<text::ChatMessage> conv;
      conv.reserve(messages.size());
      for (const Message& m : messages) conv.push_back({m.role, m.content});
      EMBER_TRY(rendered, tmpl_.render(conv, true, bos_, eos_));
    } else {
      auto msgs = nlohmann::ordered_json::array();
      for (const Message& m : messages) msgs.push_back(message_json(m));
      auto ctx = text::ChatTemplate::make_context(std::move(msgs), tools, true, bos_, eos_);
      EMBER_TRY(rendered, tool_tmpl_.render_context(ctx, std::nullopt));
    }
    // The template writes BOS and turn markers itself: parse them, add nothing.
    return tok_->encode(rendered, /*add_special=*/false, /*parse_special=*/true);
  }

  std::string decode(const std::vector<int32_t>& ids) const override {
    return tok_->decode(ids, /*render_special=*/false);
  }

  text::ToolFormat tool_format() const override { return format_; }

  Result<std::shared_ptr<const text::CompiledGrammar>> grammar(
      const std::string& key, const std::function<Result<text::Grammar>()>& build) const override {
    {
      std::lock_guard lk(mu_);
      if (auto it = grammars_.find(key); it != grammars_.end()) return it->second;
    }
    EMBER_TRY(text::Grammar g, build());
    auto compiled = std::make_shared<const text::CompiledGrammar>(std::move(g), token_table());
    std::lock_guard lk(mu_);
    if (grammars_.size() >= 64) grammars_.clear();  // a bound, not an LRU: schemas repeat
    grammars_.emplace(key, compiled);
    return compiled;
  }

  std::vector<int32_t> encode_prompt(std::string_view prompt) const override {
    return tok_->encode(prompt, /*add_special=*/true, /*parse_special=*/false);
  }

  std::unique_ptr<Detokenizer> detokenizer() const override {
    return std::make_unique<TokenizerDetokenizer>(tok_);
  }

  std::string token_text(int32_t id) const override { return tok_->token_to_piece(id, false); }

 private:
  // Each token's bytes for grammars: control tokens have none (a grammar never produces them);
  // built on first use (sorting the vocabulary takes a few milliseconds).
  std::shared_ptr<const text::TokenTable> token_table() const {
    std::call_once(table_once_, [&] {
      std::vector<std::string> pieces(size_t(tok_->n_vocab()));
      for (int32_t id = 0; id < tok_->n_vocab(); ++id)
        pieces[size_t(id)] = tok_->token_to_piece(id);
      table_ = std::make_shared<const text::TokenTable>(std::move(pieces), tok_->vocab().eog);
    });
    return table_;
  }

  std::shared_ptr<const text::Tokenizer> tok_;
  text::ChatTemplate tmpl_, tool_tmpl_;
  std::string bos_, eos_;
  text::ToolFormat format_ = text::ToolFormat::Hermes;
  mutable std::once_flag table_once_;
  mutable std::shared_ptr<const text::TokenTable> table_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<const text::CompiledGrammar>> grammars_;
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
  // Tools render with the model's template when it knows them; a ChatML model without tool
  // support gets ember's ChatML template with Hermes-style tools (the format its calls take).
  std::string tool_source = source;
  if (!text::template_renders_tools(source) && source.find("<|im_start|>") != std::string::npos) {
    tool_source = text::chatml_tool_template();
  }
  EMBER_TRY(text::ChatTemplate tmpl, text::ChatTemplate::parse(source));
  EMBER_TRY(text::ChatTemplate tool_tmpl, text::ChatTemplate::parse(tool_source));
  return std::unique_ptr<TextCodec>(
      new ModelTextCodec(std::move(tok), std::move(tmpl), std::move(tool_tmpl)));
}

}  // namespace ember::server
