#include "text/text_codec.h"

#include <algorithm>

#include "base/log.h"

namespace ember::text {
namespace {

// Used when the GGUF carries no template and ember has none built in for the architecture
// (e.g. fixture models): ChatML, as llama.cpp also falls back to.
constexpr const char* kFallbackChatML =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

bool is_system_role(const std::string& role) {
  return role == "system" || role == "developer";
}

// Refuses [system, user] and renders [user]: a template with no system role (Gemma 2).
bool template_refuses_system(const ChatTemplate& t, const std::string& bos,
                             const std::string& eos) {
  const std::vector<ChatMessage> with_system{{"system", "s"}, {"user", "u"}};
  const std::vector<ChatMessage> user_only{{"user", "u"}};
  if (t.render(with_system, true, bos, eos).ok()) return false;
  return t.render(user_only, true, bos, eos).ok();
}

// System messages leave the conversation; their text (joined by blank lines) opens the next
// user turn, followed by a blank line, or becomes a user turn of its own when none follows.
std::vector<ChatMessage> fold_system(const std::vector<ChatMessage>& messages) {
  std::vector<ChatMessage> out;
  std::string pending;
  for (const ChatMessage& m : messages) {
    if (is_system_role(m.role)) {
      if (!m.content.empty()) pending += (pending.empty() ? "" : "\n\n") + m.content;
    } else if (m.role == "user" && !pending.empty()) {
      out.push_back({"user", pending + "\n\n" + m.content});
      pending.clear();
    } else {
      out.push_back(m);
    }
  }
  if (!pending.empty()) out.push_back({"user", pending});
  return out;
}

// The same over Hugging Face-shaped messages (content a string, null or an array of parts).
nlohmann::ordered_json fold_system(const nlohmann::ordered_json& messages) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  std::string pending;
  for (const auto& m : messages) {
    const auto content = m.find("content");
    const bool text = content != m.end() && content->is_string();
    if (is_system_role(m.value("role", ""))) {
      if (text && !content->get<std::string>().empty()) {
        pending += (pending.empty() ? "" : "\n\n") + content->get<std::string>();
      }
      continue;
    }
    out.push_back(m);
    if (m.value("role", "") != "user" || pending.empty()) continue;
    auto& c = out.back()["content"];
    if (c.is_string()) {
      c = pending + "\n\n" + c.get<std::string>();
    } else if (c.is_array()) {
      c.insert(c.begin(), nlohmann::ordered_json{{"type", "text"}, {"text", pending + "\n\n"}});
    } else {
      c = pending;
    }
    pending.clear();
  }
  if (!pending.empty()) out.push_back({{"role", "user"}, {"content", pending}});
  return out;
}

}  // namespace

int32_t template_end_of_turn(const Tokenizer& tok, const ChatTemplate& tmpl, const std::string& bos,
                             const std::string& eos) {
  constexpr std::string_view kProbe = "ember-end-of-turn-probe";
  std::vector<ChatMessage> conv{{"user", "hi"}, {"assistant", std::string(kProbe)}};
  auto rendered = tmpl.render(conv, false, bos, eos);
  if (!rendered) return -1;  // a template that cannot render this: the vocabulary's set only
  size_t at = rendered->rfind(kProbe);
  if (at == std::string::npos) return -1;
  std::string_view tail = std::string_view(*rendered).substr(at + kProbe.size());
  const auto& types = tok.vocab().types;
  for (int32_t id : tok.encode(tail, /*add_special=*/false, /*parse_special=*/true)) {
    auto t = types[static_cast<size_t>(id)];
    if (t == TokenType::Control || t == TokenType::UserDefined) return id;
    if (tok.token_to_piece(id).find_first_not_of(" \n") != std::string::npos) {
      return -1;  // plain text before any special token: the turn has no marker token
    }
  }
  return -1;
}

TextCodec::TextCodec(std::shared_ptr<const Tokenizer> tok, ChatTemplate tmpl,
                     ChatTemplate tool_tmpl, TextCodecOptions options, bool fallback)
    : tok_(std::move(tok)),
      tmpl_(std::move(tmpl)),
      tool_tmpl_(std::move(tool_tmpl)),
      options_(std::move(options)),
      fallback_(fallback) {
  const auto& v = tok_->vocab();
  if (v.bos >= 0) bos_ = tok_->token_to_piece(v.bos, true);
  if (v.eos >= 0) eos_ = tok_->token_to_piece(v.eos, true);
  eog_ = v.eog;
  if (int32_t eot = template_end_of_turn(*tok_, tmpl_, bos_, eos_); eot >= 0) eog_.push_back(eot);
  std::sort(eog_.begin(), eog_.end());
  eog_.erase(std::unique(eog_.begin(), eog_.end()), eog_.end());
  tool_format_ = tool_format_for_template(tool_tmpl_.source());
  fold_system_ = template_refuses_system(tmpl_, bos_, eos_);
}

Result<std::unique_ptr<TextCodec>> TextCodec::create(std::shared_ptr<const Tokenizer> tok,
                                                     TextCodecOptions options) {
  std::string source = tok->vocab().chat_template;
  bool fallback = false;
  if (source.empty()) {
    if (auto builtin = builtin_template(options.arch_name)) {
      source = *builtin;
    } else {
      log::warn("the model has no chat template and ember has none built in for '{}': using ChatML",
                options.arch_name);
      source = kFallbackChatML;
      fallback = true;
    }
  }
  // Tools render with the model's template when it knows them; a ChatML model without tool
  // support gets ember's ChatML template with Hermes-style tools (the format its calls take).
  std::string tool_source = source;
  if (!template_renders_tools(source) && source.find("<|im_start|>") != std::string::npos) {
    tool_source = chatml_tool_template();
  }
  EMBER_TRY(ChatTemplate tmpl, ChatTemplate::parse(source));
  EMBER_TRY(ChatTemplate tool_tmpl, ChatTemplate::parse(tool_source));
  return std::unique_ptr<TextCodec>(new TextCodec(
      std::move(tok), std::move(tmpl), std::move(tool_tmpl), std::move(options), fallback));
}

std::vector<ChatMessage> TextCodec::with_default_system(
    const std::vector<ChatMessage>& messages) const {
  const bool has_system = std::any_of(messages.begin(), messages.end(),
                                      [](const ChatMessage& m) { return is_system_role(m.role); });
  if (has_system || options_.default_system_prompt.empty()) return messages;
  std::vector<ChatMessage> out;
  out.reserve(messages.size() + 1);
  out.push_back({"system", options_.default_system_prompt});
  out.insert(out.end(), messages.begin(), messages.end());
  return out;
}

Result<std::string> TextCodec::render_chat(const std::vector<ChatMessage>& messages) const {
  std::vector<ChatMessage> conv = with_default_system(messages);
  return tmpl_.render(fold_system_ ? fold_system(conv) : conv, true, bos_, eos_);
}

Result<std::vector<int32_t>> TextCodec::encode_chat(
    const std::vector<ChatMessage>& messages) const {
  EMBER_TRY(std::string rendered, render_chat(messages));
  return tok_->encode(rendered, /*add_special=*/false, /*parse_special=*/true);
}

Result<std::vector<int32_t>> TextCodec::encode_chat_with_tools(
    const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools) const {
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  bool has_system = false;
  for (const auto& m : messages) has_system = has_system || is_system_role(m.value("role", ""));
  if (!has_system && !options_.default_system_prompt.empty()) {
    msgs.push_back({{"role", "system"}, {"content", options_.default_system_prompt}});
  }
  for (const auto& m : messages) msgs.push_back(m);
  if (fold_system_) msgs = fold_system(msgs);
  auto ctx = ChatTemplate::make_context(std::move(msgs), tools, true, bos_, eos_);
  EMBER_TRY(std::string rendered, tool_tmpl_.render_context(ctx, std::nullopt));
  return tok_->encode(rendered, /*add_special=*/false, /*parse_special=*/true);
}

// Each token's bytes for grammars: control tokens have none (a grammar never produces them);
// built on first use (sorting the vocabulary takes tens of milliseconds).
std::shared_ptr<const TokenTable> TextCodec::token_table() const {
  std::call_once(table_once_, [&] {
    std::vector<std::string> pieces(size_t(tok_->n_vocab()));
    for (int32_t id = 0; id < tok_->n_vocab(); ++id) pieces[size_t(id)] = tok_->token_to_piece(id);
    table_ = std::make_shared<const TokenTable>(std::move(pieces), eog_);
  });
  return table_;
}

Result<std::shared_ptr<const CompiledGrammar>> TextCodec::grammar(
    const std::string& key, const std::function<Result<Grammar>()>& build) const {
  {
    std::lock_guard lk(grammar_mu_);
    if (auto it = grammars_.find(key); it != grammars_.end()) return it->second;
  }
  EMBER_TRY(Grammar g, build());
  auto compiled = std::make_shared<const CompiledGrammar>(std::move(g), token_table());
  std::lock_guard lk(grammar_mu_);
  if (grammars_.size() >= 64) grammars_.clear();  // a bound, not an LRU: schemas repeat
  grammars_.emplace(key, compiled);
  return compiled;
}

std::vector<int32_t> TextCodec::encode_prompt(std::string_view prompt) const {
  return tok_->encode(prompt, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace ember::text
