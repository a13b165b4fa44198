// The one text path shared by `ember serve` and `ember run`: chat template + tokenizer on the
// way in, incremental detokenization on the way out, and the end-of-generation ids. Each
// behaviour is decided here once, so both commands render and encode a prompt the same way:
//  - template: the GGUF's tokenizer.chat_template; else ember's built-in one for the
//    architecture (gemma2, gemma3); else ChatML, as llama.cpp falls back to (with a warning);
//  - default system prompt: prepended only when a conversation has no system (or developer)
//    message; empty disables it (as Ollama's SYSTEM default);
//  - a template that refuses a system turn (Gemma 2's raises "System role not supported") but
//    renders a user turn: system text is folded into the next user turn, as "SYSTEM\n\nUSER"
//    (what Gemma 3's template does itself), so neither the default prompt nor a client's
//    system message makes every chat fail;
//  - chat: the template writes BOS and turn markers itself, so the rendered text is tokenized
//    with special tokens parsed and nothing added;
//  - raw prompt (`run --prompt`, /v1/completions): BOS added as the vocabulary asks, and special
//    tokens parsed, as llama.cpp's llama-cli and llama-server do (a hand-written turn marker is
//    the marker, not its letters);
//  - end of generation: the vocabulary's EOG set plus the end-of-turn token the template writes
//    after an assistant message (found by rendering one).
//  - tools: requests with tools, or with a tool history, render with a template that knows
//    tools: the model's own, or, for a ChatML template without tool support (SmolLM2), ember's
//    ChatML template with Hermes-style calls (text/tool_calls.h); tool_format() follows it;
//  - grammars (structured output, forced tool calls) compile against this vocabulary's token
//    bytes, cached by key so repeated schemas reuse their masks.
// Invariant: a TextCodec is immutable after create() (apart from its internally locked grammar
// cache) and safe to use from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "text/chat_template.h"
#include "text/grammar_mask.h"
#include "text/tokenizer.h"
#include "text/tool_calls.h"

namespace ember::text {

// The default system prompt of `ember serve --system-prompt` and `ember run --chat --system`.
inline constexpr const char* kDefaultSystemPrompt = "You are a helpful assistant.";

struct TextCodecOptions {
  std::string arch_name;              // picks the built-in template when the GGUF has none
  std::string default_system_prompt;  // "" : none
};

class TextCodec {
 public:
  static Result<std::unique_ptr<TextCodec>> create(std::shared_ptr<const Tokenizer> tok,
                                                   TextCodecOptions options);

  // The conversation with the default system prompt applied (when it has no system message).
  std::vector<ChatMessage> with_default_system(const std::vector<ChatMessage>& messages) const;
  // Renders with the generation prompt (default system applied) and tokenizes the result.
  Result<std::string> render_chat(const std::vector<ChatMessage>& messages) const;
  Result<std::vector<int32_t>> encode_chat(const std::vector<ChatMessage>& messages) const;
  std::vector<int32_t> encode_prompt(std::string_view prompt) const;
  // A conversation as chat templates see it (Hugging Face's message shape: tool_calls,
  // tool_call_id, content null), with `tools` (the OpenAI array, or null), rendered with the
  // tool-capable template (default system applied) and tokenized.
  Result<std::vector<int32_t>> encode_chat_with_tools(const nlohmann::ordered_json& messages,
                                                      const nlohmann::ordered_json& tools) const;
  // The text of token ids (completions `echo` of a token-id prompt).
  std::string decode(const std::vector<int32_t>& ids) const { return tok_->decode(ids, false); }
  // How the model writes tool calls (from the template tools are rendered with).
  ToolFormat tool_format() const { return tool_format_; }
  // A grammar compiled against this vocabulary, cached by `key`; `build` runs on a miss.
  Result<std::shared_ptr<const CompiledGrammar>> grammar(
      const std::string& key, const std::function<Result<Grammar>()>& build) const;

  IncrementalDetokenizer detokenizer() const { return IncrementalDetokenizer(*tok_); }
  // The token's own text, for logprobs (may be a partial UTF-8 sequence).
  std::string token_text(int32_t id) const { return tok_->token_to_piece(id, false); }
  // Sorted, unique: the vocabulary's EOG ids and the template's end-of-turn token.
  const std::vector<int32_t>& eog_tokens() const { return eog_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  bool template_is_fallback() const { return fallback_; }
  // True when the template refuses a system turn and system text is folded into a user turn.
  bool folds_system() const { return fold_system_; }

 private:
  TextCodec(std::shared_ptr<const Tokenizer> tok, ChatTemplate tmpl, ChatTemplate tool_tmpl,
            TextCodecOptions options, bool fallback);
  std::shared_ptr<const TokenTable> token_table() const;
  std::shared_ptr<const Tokenizer> tok_;
  ChatTemplate tmpl_, tool_tmpl_;
  ToolFormat tool_format_ = ToolFormat::Hermes;
  mutable std::once_flag table_once_;
  mutable std::shared_ptr<const TokenTable> table_;
  mutable std::mutex grammar_mu_;
  mutable std::map<std::string, std::shared_ptr<const CompiledGrammar>> grammars_;
  TextCodecOptions options_;
  bool fallback_ = false;
  bool fold_system_ = false;
  std::string bos_, eos_;
  std::vector<int32_t> eog_;
};

// The token the template writes right after an assistant message's content (e.g. <|im_end|>,
// <end_of_turn>), if that is a special (control or user-defined) token; -1 otherwise.
int32_t template_end_of_turn(const Tokenizer& tok, const ChatTemplate& tmpl, const std::string& bos,
                             const std::string& eos);

}  // namespace ember::text
