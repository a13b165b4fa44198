// The one text path shared by `ember serve` and `ember run`: chat template + tokenizer on the
// way in, incremental detokenization on the way out, and the end-of-generation ids. Each
// behaviour is decided here once, so both commands render and encode a prompt the same way:
//  - template: the GGUF's tokenizer.chat_template; else ember's built-in one for the
//    architecture (gemma3); else ChatML, as llama.cpp falls back to (with a warning);
//  - default system prompt: prepended only when a conversation has no system (or developer)
//    message; empty disables it (as Ollama's SYSTEM default);
//  - chat: the template writes BOS and turn markers itself, so the rendered text is tokenized
//    with special tokens parsed and nothing added;
//  - raw prompt (`run --prompt`, /v1/completions): BOS added as the vocabulary asks, and special
//    tokens parsed, as llama.cpp's llama-cli and llama-server do (a hand-written turn marker is
//    the marker, not its letters);
//  - end of generation: the vocabulary's EOG set plus the end-of-turn token the template writes
//    after an assistant message (found by rendering one).
// Invariant: a TextCodec is immutable after create() and safe to use from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

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

  IncrementalDetokenizer detokenizer() const { return IncrementalDetokenizer(*tok_); }
  // The token's own text, for logprobs (may be a partial UTF-8 sequence).
  std::string token_text(int32_t id) const { return tok_->token_to_piece(id, false); }
  // Sorted, unique: the vocabulary's EOG ids and the template's end-of-turn token.
  const std::vector<int32_t>& eog_tokens() const { return eog_; }
  const Tokenizer& tokenizer() const { return *tok_; }
  bool template_is_fallback() const { return fallback_; }

 private:
  TextCodec(std::shared_ptr<const Tokenizer> tok, ChatTemplate tmpl, TextCodecOptions options,
            bool fallback);
  std::shared_ptr<const Tokenizer> tok_;
  ChatTemplate tmpl_;
  TextCodecOptions options_;
  bool fallback_ = false;
  std::string bos_, eos_;
  std::vector<int32_t> eog_;
};

// The token the template writes right after an assistant message's content (e.g. <|im_end|>,
// <end_of_turn>), if that is a special (control or user-defined) token; -1 otherwise.
int32_t template_end_of_turn(const Tokenizer& tok, const ChatTemplate& tmpl, const std::string& bos,
                             const std::string& eos);

}  // namespace ember::text
