#include "text/tokenizer.h"

#include <algorithm>

#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace ember::text {

namespace detail {

TokenMap build_token_map(const Vocab& v) {
  TokenMap m;
  m.reserve(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    m.insert_or_assign(v.tokens[i], static_cast<int32_t>(i));
  }
  return m;
}

SpecialSplitter::SpecialSplitter(const Vocab& v) {
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenType t = v.types[i];
    if (v.tokens[i].empty()) continue;
    if (t == TokenType::Control || t == TokenType::Unknown) {
      specials_.push_back({static_cast<int32_t>(i), v.tokens[i], false});
    } else if (t == TokenType::UserDefined) {
      specials_.push_back({static_cast<int32_t>(i), v.tokens[i], true});
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(), [](const Special& a, const Special& b) {
    return a.text.size() > b.text.size();
  });
}

std::vector<Fragment> SpecialSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({-1, text});
  std::vector<Fragment> next;
  for (const auto& sp : specials_) {
    if (!sp.always && !parse_special) continue;
    // Most special tokens never occur: one search of the whole text rules them out cheaply.
    if (text.find(sp.text) == std::string_view::npos) continue;
    next.clear();
    for (const auto& fr : frags) {
      if (fr.token >= 0) {
        next.push_back(fr);
        continue;
      }
      std::string_view rest = fr.text;
      for (size_t pos; (pos = rest.find(sp.text)) != std::string_view::npos;) {
        if (pos > 0) next.push_back({-1, rest.substr(0, pos)});
        next.push_back({sp.id, sp.text});
        rest.remove_prefix(pos + sp.text.size());
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    frags.swap(next);
  }
  return frags;
}

}  // namespace detail

Result<std::unique_ptr<Tokenizer>> Tokenizer::create(Vocab vocab) {
  if (vocab.tokens.empty()) return fail("tokenizer: the vocabulary has no tokens");
  if (vocab.types.empty()) vocab.types.assign(vocab.tokens.size(), TokenType::Normal);
  if (vocab.types.size() != vocab.tokens.size()) {
    return fail("tokenizer: {} token types for {} tokens", vocab.types.size(), vocab.tokens.size());
  }
  if (!vocab.scores.empty() && vocab.scores.size() != vocab.tokens.size()) {
    return fail("tokenizer: {} scores for {} tokens", vocab.scores.size(), vocab.tokens.size());
  }
  const auto n = static_cast<int32_t>(vocab.tokens.size());
  for (int32_t id : {vocab.bos, vocab.eos, vocab.eot, vocab.unk, vocab.pad}) {
    if (id >= n) return fail("tokenizer: special token id {} is past the vocabulary ({})", id, n);
  }
  if (vocab.add_bos && vocab.bos < 0) return fail("tokenizer: add_bos is set but there is no BOS");
  if (vocab.add_eos && vocab.eos < 0) return fail("tokenizer: add_eos is set but there is no EOS");
  if (vocab.model == "gpt2") return detail::make_bpe_tokenizer(std::move(vocab));
  if (vocab.model == "llama") return detail::make_spm_tokenizer(std::move(vocab));
  return fail("tokenizer: model '{}' is not supported (expected 'gpt2' or 'llama')", vocab.model);
}

std::string Tokenizer::token_to_piece(int32_t id, bool render_special) const {
  if (id < 0 || id >= n_vocab()) return {};
  switch (vocab_.types[id]) {
    case TokenType::Control:
    case TokenType::Unknown:
      return render_special ? vocab_.tokens[id] : std::string();
    case TokenType::UserDefined:
      return vocab_.tokens[id];
    case TokenType::Normal:
    case TokenType::Byte:
      return text_piece(id);
    default:
      return {};
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool render_special) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = token_to_piece(ids[i], render_special);
    // SentencePiece with a space prefix: the first token's leading space is the added one
    // (llama.cpp's detokenizer strips it the same way).
    if (i == 0 && vocab_.add_space_prefix && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    out += piece;
  }
  return out;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && std::find(vocab_.eog.begin(), vocab_.eog.end(), id) != vocab_.eog.end();
}

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_ += tok_.token_to_piece(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const int n = utf8_char_at(pending_, i);
    if (n == 0) break;  // an incomplete character at the end: wait for the next token
    if (n < 0) {
      out += "\xEF\xBF\xBD";  // can never become valid: replace now rather than stall
      i += 1;
    } else {
      out.append(pending_, i, n);
      i += n;
    }
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace ember::text
