// The text side of serving, as the HTTP layer needs it: chat template + tokenizer on the way
// in, incremental detokenization on the way out. An interface so the HTTP layer's tests can
// run on a tiny fake instead of a model; make_text_codec() builds the real one from text/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "server/openai_request.h"
#include "text/grammar_mask.h"
#include "text/tool_calls.h"

namespace ember::text {
class Tokenizer;
}

namespace ember::server {

// Emits only whole UTF-8 characters (DESIGN.md §8: nlohmann dump throws on partial ones).
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // Applies the chat template (with the generation prompt) and tokenizes the result. `tools`:
  // the OpenAI tools array or null; with tools or a tool history, a template that renders
  // tools is used (the model's own, or ember's ChatML tool template for ChatML models).
  virtual Result<std::vector<int32_t>> encode_chat(const std::vector<Message>& messages,
                                                   const nlohmann::ordered_json& tools) const = 0;
  Result<std::vector<int32_t>> encode_chat(const std::vector<Message>& messages) const {
    return encode_chat(messages, nullptr);
  }
  // The text of token ids (completions `echo` of a token-id prompt).
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // How the model writes tool calls (from the template tools are rendered with).
  virtual text::ToolFormat tool_format() const = 0;
  // A grammar compiled against this vocabulary, cached by `key` (so repeated requests with the
  // same schema reuse its masks); `build` runs on a miss. Errors are build's.
  virtual Result<std::shared_ptr<const text::CompiledGrammar>> grammar(
      const std::string& key, const std::function<Result<text::Grammar>()>& build) const = 0;
  // A raw completion prompt: BOS added as the vocabulary asks, special tokens not parsed.
  virtual std::vector<int32_t> encode_prompt(std::string_view prompt) const = 0;
  virtual std::unique_ptr<Detokenizer> detokenizer() const = 0;
  // The token's own text, for logprobs (may be a partial UTF-8 sequence).
  virtual std::string token_text(int32_t id) const = 0;
};

// template_source: the GGUF's tokenizer.chat_template; empty: ember's built-in template for
// `arch_name` (e.g. gemma3). Errors: no template at all, or a template that does not parse.
Result<std::unique_ptr<TextCodec>> make_text_codec(std::shared_ptr<const text::Tokenizer> tok,
                                                   const std::string& arch_name);

}  // namespace ember::server
