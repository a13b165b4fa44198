// Pre-tokenizer for byte-level BPE: splits text into the "words" that merges never cross, with
// the regexes llama.cpp uses for each tokenizer.ggml.pre value (PCRE2, UTF + UCP, JIT when the
// library has it). Several regexes apply in stages, each splitting the previous stage's pieces;
// text no alternative matches stays as a piece of its own, so pieces always concatenate back to
// the input. Thread-safe: split() allocates its own match data.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace ember::text {

class PreTokenizer {
 public:
  // "" (no tokenizer.ggml.pre) is llama.cpp's "default" set; a name not in is_known() is an
  // error naming the supported ones (llama.cpp refuses such files too).
  static Result<PreTokenizer> create(std::string_view pre);
  // The regex stages for a pre name, exactly as llama.cpp spells them.
  static std::vector<std::string> regexes_for(std::string_view pre);
  // llama3-style vocabularies emit a word that is itself a token without running merges.
  static bool ignores_merges(std::string_view pre);
  static bool is_known(std::string_view pre);

  // text must be valid UTF-8 (see sanitize_utf8). Pieces are views into text.
  std::vector<std::string_view> split(std::string_view text) const;

 private:
  struct Compiled;
  std::vector<std::shared_ptr<const Compiled>> stages_;
};

}  // namespace ember::text
