// Internals shared by the BPE and SPM tokenizers (not part of the public interface): the token
// text -> id map and the special-token partition that runs before either algorithm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/tokenizer.h"

namespace ember::text::detail {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
// Text -> id; with duplicate texts the last id wins (as in llama.cpp). Keys view the Vocab's
// strings, so the map must not outlive the Vocab it was built from.
using TokenMap = std::unordered_map<std::string_view, int32_t, StringHash>;
TokenMap build_token_map(const Vocab& v);

// A piece of the input: raw text still to tokenize, or a special token already recognised.
struct Fragment {
  int32_t token = -1;  // >= 0: a special token
  std::string_view text;
};

// Splits text around special tokens the way llama.cpp does: tokens of type Control, Unknown
// and UserDefined, longest text first; each one cuts every raw fragment at all its
// occurrences. Control and Unknown tokens take part only when parse_special; UserDefined
// tokens always do.
class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocab& v);
  std::vector<Fragment> split(std::string_view text, bool parse_special) const;

 private:
  struct Special {
    int32_t id;
    std::string_view text;  // points into the Vocab owned by the Tokenizer
    bool always;            // UserDefined: matched even without parse_special
  };
  std::vector<Special> specials_;
};

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(Vocab v);
Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(Vocab v);

}  // namespace ember::text::detail
