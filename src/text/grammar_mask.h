// Grammar-constrained decoding over a vocabulary: which tokens may come next, as a mask.
//
// TokenTable holds each token's bytes, sorted so that a mask is computed by walking the
// vocabulary once in byte order, reusing the recognizer's state for a shared prefix and
// skipping every token under a prefix the grammar refuses. CompiledGrammar caches the mask per
// recognizer state (most states repeat: "inside a string", "after a comma", ...), so the walk
// runs once per distinct state, not once per generated token. GrammarMatcher is one request's
// position in a CompiledGrammar.
//
// Invariants: a masked-in token's bytes all step the recognizer; end-of-generation tokens are
// masked in exactly when the value may end there; tokens with no bytes (control tokens) are
// never masked in. TokenTable and CompiledGrammar are immutable apart from the mask cache,
// which a mutex guards, so both can be shared between requests and threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/grammar.h"

namespace ember::text {

class TokenTable {
 public:
  // pieces[id]: the bytes token id stands for ("" for tokens a grammar may never produce);
  // eog: end-of-generation ids.
  TokenTable(std::vector<std::string> pieces, std::vector<int32_t> eog);
  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[size_t(id)]; }
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog() const { return eog_; }

 private:
  friend class CompiledGrammar;
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<int32_t> order_;  // ids with non-empty pieces, sorted by bytes
  std::vector<uint32_t> lcp_;   // bytes shared with the previous id in order_
  // Tokens that are plain string content (whole UTF-8 characters, no '"', '\\' or control
  // characters): a string accepts them whatever surrounds it. The others, to step one by one.
  std::vector<uint64_t> plain_;  // [n_vocab bits]
  std::vector<int32_t> not_plain_;
  size_t max_len_ = 0;
};

struct TokenMask {
  std::vector<uint64_t> bits;  // [n_vocab bits] tokens that may come next (eog excluded)
  bool can_end = false;        // end-of-generation tokens may come next
  bool any() const;
};

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar g, std::shared_ptr<const TokenTable> tokens);
  const Grammar& grammar() const { return grammar_; }
  const TokenTable& tokens() const { return *tokens_; }
  // The mask for a recognizer state (cached).
  std::shared_ptr<const TokenMask> mask(const Machine& m) const;
  size_t cached_masks() const;

 private:
  std::shared_ptr<TokenMask> compute(const Machine& m) const;
  Grammar grammar_;
  std::shared_ptr<const TokenTable> tokens_;
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const TokenMask>> cache_;
};

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> g);
  // Sets every logit the grammar forbids to -infinity; false if no token is allowed.
  bool apply(std::span<float> logits) const;
  // Advances past a token; false if the grammar does not allow it (the state is then unchanged).
  bool accept(int32_t id);
  // Advances past text (e.g. a prefix the prompt already holds); false if not allowed.
  bool accept_text(std::string_view bytes);
  bool done() const { return machine_.done(); }
  bool can_end() const { return machine_.can_end(); }

 private:
  std::shared_ptr<const CompiledGrammar> g_;
  Machine machine_;
};

}  // namespace ember::text
