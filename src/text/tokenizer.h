// Tokenizers: text <-> token ids, matching llama.cpp's ids for the same GGUF.
//  - byte-level BPE (model "gpt2"): pre-tokenizer regex chosen by vocab.pre, GPT-2 byte mapping,
//    ranked merges;
//  - SentencePiece-style (model "llama"): space marker U+2581, score-driven merges, byte
//    fallback <0xNN>.
// Special (control / user-defined) tokens are matched in the text only when parse_special.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "text/vocab.h"

namespace ember::text {

class Tokenizer {
 public:
  static Result<std::unique_ptr<Tokenizer>> create(Vocab vocab);
  virtual ~Tokenizer() = default;

  // add_bos: prepend BOS when the vocab asks for it (vocab.add_bos).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;
  // The bytes this token stands for (may be a partial UTF-8 sequence). Control and unknown
  // tokens give "" unless render_special; user-defined tokens are their own text.
  std::string token_to_piece(int32_t id, bool render_special = false) const;
  std::string decode(std::span<const int32_t> ids, bool render_special = false) const;

  const Vocab& vocab() const { return vocab_; }
  int32_t n_vocab() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  bool is_eog(int32_t id) const;

 protected:
  explicit Tokenizer(Vocab v) : vocab_(std::move(v)) {}
  // The bytes of a Normal or Byte token, in the algorithm's own encoding of the vocabulary.
  virtual std::string text_piece(int32_t id) const = 0;
  Vocab vocab_;
};

// Turns a stream of token ids into text, emitting only whole UTF-8 characters: bytes of a
// character split across tokens are held until it is complete.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);  // whatever is now complete
  std::string flush();           // the rest, invalid bytes replaced by U+FFFD

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace ember::text
