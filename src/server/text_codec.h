// The text side of serving, as the HTTP layer needs it: chat template + tokenizer on the way
// in, incremental detokenization on the way out. An interface so the HTTP layer's tests can
// run on a tiny fake instead of a model; make_text_codec() builds the real one from text/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "server/openai_request.h"

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
  // Applies the chat template (with the generation prompt) and tokenizes the result.
  virtual Result<std::vector<int32_t>> encode_chat(const std::vector<Message>& messages) const = 0;
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
