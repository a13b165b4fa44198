// The vocabulary as a GGUF file describes it (tokenizer.ggml.*), independent of the algorithm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "gguf/reader.h"

namespace ember::text {

// tokenizer.ggml.token_type values
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

struct Vocab {
  std::string model;  // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
  std::string pre;    // tokenizer.ggml.pre: "llama3"/"llama-bpe", "qwen2", "gpt-2", "default", ...
  std::vector<std::string> tokens;
  std::vector<float> scores;        // may be empty for BPE
  std::vector<TokenType> types;     // same length as tokens
  std::vector<std::string> merges;  // "a b" pairs, BPE only, highest priority first
  int32_t bos = -1, eos = -1, eot = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;  // SentencePiece: prepend the space marker
  std::vector<int32_t> eog;       // end-of-generation ids (eos, eot, and e.g. <end_of_turn>)
  std::string chat_template;      // tokenizer.chat_template, may be empty
};

// Reads tokenizer.ggml.* from the file; errors name the key and the problem.
Result<Vocab> load_vocab(const gguf::File& f);

}  // namespace ember::text
