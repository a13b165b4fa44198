// load_vocab: tokenizer.ggml.* -> Vocab, with llama.cpp's defaults and its text-based detection
// of end-of-turn tokens, so that ids, add_bos and the end-of-generation set agree with it.
#include "text/vocab.h"

#include <algorithm>
#include <unordered_map>

#include "text/pretokenize.h"

namespace ember::text {

namespace {

// Texts llama.cpp treats as end-of-turn / end-of-generation whatever the file says.
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",  "[EOT]",         "<｜end▁of▁sentence｜>",
    "<end_of_utterance>"};
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>",    "<|end|>",         "<|return|>",        "<|call|>", "<|flush|>",
    "<|calls|>",  "<end_of_turn>", "<|endoftext|>",   "<|eom_id|>",        "<EOT>",    "_<EOT>",
    "[EOT]",      "[EOS]",         "<|end_of_text|>", "<end_of_utterance>"};

template <size_t N>
bool in(std::string_view s, const std::string_view (&set)[N]) {
  return std::find(std::begin(set), std::end(set), s) != std::end(set);
}

Status read_id(const gguf::File& f, const char* key, int32_t& id, size_t n_tokens) {
  if (f.find(key) == nullptr) return {};
  EMBER_TRY(int64_t v, f.get_int(key));
  if (v < 0 || static_cast<uint64_t>(v) >= n_tokens) {
    return fail("{}: metadata '{}' = {} is not a token id (the vocabulary has {} tokens)", f.path(),
                key, v, n_tokens);
  }
  id = static_cast<int32_t>(v);
  return {};
}

}  // namespace

Result<Vocab> load_vocab(const gguf::File& f) {
  Vocab v;
  if (f.find("tokenizer.ggml.model") == nullptr) {
    return fail("{}: metadata 'tokenizer.ggml.model' is missing: the file has no tokenizer",
                f.path());
  }
  EMBER_TRY(v.model, f.get_string("tokenizer.ggml.model"));
  EMBER_TRY(v.pre, f.get_string_or("tokenizer.ggml.pre", ""));
  const bool spm = v.model == "llama";
  const bool bpe = v.model == "gpt2";
  if (!spm && !bpe) {
    return fail(
        "{}: metadata 'tokenizer.ggml.model' is '{}'; ember supports 'gpt2' (byte-level "
        "BPE) and 'llama' (SentencePiece)",
        f.path(), v.model);
  }

  if (f.find("tokenizer.ggml.tokens") == nullptr) {
    return fail("{}: metadata 'tokenizer.ggml.tokens' is missing", f.path());
  }
  {
    EMBER_TRY(auto toks, f.get_string_array("tokenizer.ggml.tokens"));
    if (toks.empty()) return fail("{}: metadata 'tokenizer.ggml.tokens' is empty", f.path());
    v.tokens.reserve(toks.size());
    for (size_t i = 0; i < toks.size(); ++i) {
      // llama.cpp renames empty tokens so that every text maps to one id
      if (toks[i].empty()) {
        v.tokens.push_back("[EMPTY_" + std::to_string(i) + "]");
      } else {
        v.tokens.emplace_back(toks[i]);
      }
    }
  }
  const size_t n = v.tokens.size();

  if (f.find("tokenizer.ggml.scores") != nullptr) {
    EMBER_TRY(v.scores, f.get_float_array("tokenizer.ggml.scores"));
    if (v.scores.size() != n) {
      return fail("{}: metadata 'tokenizer.ggml.scores' has {} entries but there are {} tokens",
                  f.path(), v.scores.size(), n);
    }
  }
  v.types.assign(n, TokenType::Normal);
  if (f.find("tokenizer.ggml.token_type") != nullptr) {
    EMBER_TRY(auto types, f.get_int_array("tokenizer.ggml.token_type"));
    if (types.size() != n) {
      return fail("{}: metadata 'tokenizer.ggml.token_type' has {} entries but there are {} tokens",
                  f.path(), types.size(), n);
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types[i];
      v.types[i] = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::Undefined;
    }
  }
  if (bpe) {
    if (f.find("tokenizer.ggml.merges") == nullptr) {
      return fail(
          "{}: metadata 'tokenizer.ggml.merges' is missing (required by a 'gpt2' "
          "tokenizer)",
          f.path());
    }
    EMBER_TRY(auto merges, f.get_string_array("tokenizer.ggml.merges"));
    v.merges.assign(merges.begin(), merges.end());
  }

  // llama.cpp's defaults, overridden by the file.
  if (spm) {
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_bos = true;
    v.add_space_prefix = true;
  } else {
    v.bos = 11, v.eos = 11;
    v.add_bos = PreTokenizer::ignores_merges(v.pre);  // the llama3 family adds BOS
  }
  if (v.bos >= static_cast<int32_t>(n)) v.bos = -1;
  if (v.eos >= static_cast<int32_t>(n)) v.eos = -1;
  if (v.unk >= static_cast<int32_t>(n)) v.unk = -1;
  EMBER_TRY_STATUS(read_id(f, "tokenizer.ggml.bos_token_id", v.bos, n));
  EMBER_TRY_STATUS(read_id(f, "tokenizer.ggml.eos_token_id", v.eos, n));
  EMBER_TRY_STATUS(read_id(f, "tokenizer.ggml.unknown_token_id", v.unk, n));
  EMBER_TRY_STATUS(read_id(f, "tokenizer.ggml.padding_token_id", v.pad, n));
  EMBER_TRY_STATUS(read_id(f, "tokenizer.ggml.eot_token_id", v.eot, n));
  int32_t eom = -1;
  EMBER_TRY_STATUS(read_id(f, "tokenizer.ggml.eom_token_id", eom, n));
  EMBER_TRY(v.add_bos, f.get_bool_or("tokenizer.ggml.add_bos_token", v.add_bos));
  EMBER_TRY(v.add_eos, f.get_bool_or("tokenizer.ggml.add_eos_token", v.add_eos));
  EMBER_TRY(v.add_space_prefix,
            f.get_bool_or("tokenizer.ggml.add_space_prefix", v.add_space_prefix));
  if (v.add_bos && v.bos < 0) {
    return fail(
        "{}: the tokenizer asks for a BOS token but 'tokenizer.ggml.bos_token_id' is "
        "missing",
        f.path());
  }
  if (v.add_eos && v.eos < 0) {
    return fail(
        "{}: the tokenizer asks for an EOS token but 'tokenizer.ggml.eos_token_id' is "
        "missing",
        f.path());
  }

  // End-of-turn and end-of-generation tokens found by their text; such tokens become Control
  // (llama.cpp overrides their type the same way). Lowest id wins where several match.
  for (size_t i = 0; i < n; ++i) {
    const std::string_view t = v.tokens[i];
    bool mark = false;
    if (v.eot < 0 && in(t, kEotTexts)) v.eot = static_cast<int32_t>(i), mark = true;
    if (eom < 0 && t == "<|eom_id|>") eom = static_cast<int32_t>(i), mark = true;
    if (in(t, kEogTexts)) v.eog.push_back(static_cast<int32_t>(i)), mark = true;
    if (mark) v.types[i] = TokenType::Control;
  }
  for (int32_t id : {v.eos, v.eot, eom}) {
    if (id >= 0) v.eog.push_back(id);
  }
  std::sort(v.eog.begin(), v.eog.end());
  v.eog.erase(std::unique(v.eog.begin(), v.eog.end()), v.eog.end());

  EMBER_TRY(v.chat_template, f.get_string_or("tokenizer.chat_template", ""));
  return v;
}

}  // namespace ember::text
