#include "text/grammar_mask.h"

#include <algorithm>
#include <limits>
#include <numeric>

namespace ember::text {

TokenTable::TokenTable(std::vector<std::string> pieces, std::vector<int32_t> eog)
    : pieces_(std::move(pieces)), eog_(std::move(eog)) {
  for (int32_t id : eog_) {
    if (id >= 0 && size_t(id) < pieces_.size()) pieces_[size_t(id)].clear();
  }
  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (!pieces_[size_t(id)].empty()) order_.push_back(id);
  }
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return pieces_[size_t(a)] < pieces_[size_t(b)] ||
           (pieces_[size_t(a)] == pieces_[size_t(b)] && a < b);
  });
  plain_.assign((size_t(n_vocab()) + 63) / 64, 0);
  for (int32_t id : order_) {
    const std::string& p = pieces_[size_t(id)];
    bool plain = true;
    for (size_t i = 0; i < p.size() && plain;) {
      const auto c = static_cast<uint8_t>(p[i]);
      size_t len = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
      if (c < 0x20 || c == '"' || c == '\\' || len == 0 || i + len > p.size()) {
        plain = false;
        break;
      }
      // The second byte's range rules out overlong forms, surrogates and > U+10FFFF.
      for (size_t k = 1; k < len; ++k) {
        const auto d = static_cast<uint8_t>(p[i + k]);
        uint8_t lo = 0x80, hi = 0xBF;
        if (k == 1 && c == 0xE0) lo = 0xA0;
        if (k == 1 && c == 0xED) hi = 0x9F;
        if (k == 1 && c == 0xF0) lo = 0x90;
        if (k == 1 && c == 0xF4) hi = 0x8F;
        if (d < lo || d > hi) plain = false;
      }
      i += len;
    }
    if (plain) {
      plain_[size_t(id) >> 6] |= uint64_t{1} << (id & 63);
    } else {
      not_plain_.push_back(id);
    }
  }
  lcp_.resize(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) {
    const std::string& cur = pieces_[size_t(order_[i])];
    max_len_ = std::max(max_len_, cur.size());
    if (i == 0) continue;
    const std::string& prev = pieces_[size_t(order_[i - 1])];
    size_t l = 0;
    while (l < cur.size() && l < prev.size() && cur[l] == prev[l]) ++l;
    lcp_[i] = static_cast<uint32_t>(l);
  }
}

bool TokenTable::is_eog(int32_t id) const {
  return std::find(eog_.begin(), eog_.end(), id) != eog_.end();
}

bool TokenMask::any() const {
  if (can_end) return true;
  for (uint64_t w : bits) {
    if (w) return true;
  }
  return false;
}

CompiledGrammar::CompiledGrammar(Grammar g, std::shared_ptr<const TokenTable> tokens)
    : grammar_(std::move(g)), tokens_(std::move(tokens)) {}

size_t CompiledGrammar::cached_masks() const {
  std::lock_guard lk(mu_);
  return cache_.size();
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(const Machine& m) const {
  std::string key(m.key());
  {
    std::lock_guard lk(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  }
  std::shared_ptr<const TokenMask> fresh = compute(m);
  std::lock_guard lk(mu_);
  constexpr size_t kMaxCached = 4096;  // ~25 MB for a 50k vocabulary at worst
  if (cache_.size() >= kMaxCached) cache_.clear();
  cache_.emplace(std::move(key), fresh);
  return fresh;
}

// One walk over the sorted vocabulary. states[d] is the recognizer after the first d bytes of
// the current token; a token sharing l bytes with the previous one starts from states[l].
std::shared_ptr<TokenMask> CompiledGrammar::compute(const Machine& m) const {
  const TokenTable& t = *tokens_;
  auto out = std::make_shared<TokenMask>();
  out->bits.assign((size_t(t.n_vocab()) + 63) / 64, 0);
  out->can_end = m.can_end();
  if (m.done()) return out;
  if (m.in_plain_string()) {  // the common state: most tokens are accepted without stepping
    out->bits = t.plain_;
    for (int32_t id : t.not_plain_) {
      Machine probe(m);
      if (probe.step(t.pieces_[size_t(id)])) out->bits[size_t(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    return out;
  }
  std::vector<Machine> states;
  states.reserve(t.max_len_ + 1);
  states.push_back(m);
  const size_t n = t.order_.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = t.order_[i];
    const std::string& p = t.pieces_[size_t(id)];
    const size_t start = std::min<size_t>(t.lcp_[i], states.size() - 1);
    states.resize(start + 1, m);
    size_t j = start;
    for (; j < p.size(); ++j) {
      states.push_back(states.back());
      if (!states.back().step(static_cast<uint8_t>(p[j]))) {
        states.pop_back();
        break;
      }
    }
    if (j == p.size()) {
      out->bits[size_t(id) >> 6] |= uint64_t{1} << (id & 63);
      continue;
    }
    // p[0..j] is refused: so is every following token that starts with it.
    while (i + 1 < n && t.lcp_[i + 1] > j) ++i;
  }
  return out;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> g)
    : g_(std::move(g)), machine_(g_->grammar()) {}

bool GrammarMatcher::apply(std::span<float> logits) const {
  auto mask = g_->mask(machine_);
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  const TokenTable& t = g_->tokens();
  const size_t n = std::min(logits.size(), size_t(t.n_vocab()));
  float eog_logits[8];
  const size_t n_eog = std::min<size_t>(t.eog().size(), 8);
  for (size_t k = 0; k < n_eog; ++k) {
    const int32_t id = t.eog()[k];
    eog_logits[k] = id >= 0 && size_t(id) < n ? logits[size_t(id)] : kNeg;
  }
  for (size_t w = 0; w * 64 < n; ++w) {
    uint64_t bits = mask->bits[w];
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (!((bits >> (i & 63)) & 1)) logits[i] = kNeg;
    }
  }
  for (size_t i = n; i < logits.size(); ++i) logits[i] = kNeg;
  if (mask->can_end) {  // eog ids have no piece, so the loop above masked them out
    for (size_t k = 0; k < n_eog; ++k) {
      const int32_t id = t.eog()[k];
      if (id >= 0 && size_t(id) < n) logits[size_t(id)] = eog_logits[k];
    }
  }
  return mask->any();
}

bool GrammarMatcher::accept(int32_t id) {
  const TokenTable& t = g_->tokens();
  if (id < 0 || id >= t.n_vocab()) return false;
  if (t.is_eog(id)) return machine_.can_end();
  const std::string& p = t.piece(id);
  if (p.empty()) return false;
  return accept_text(p);
}

bool GrammarMatcher::accept_text(std::string_view bytes) {
  Machine next(machine_);
  if (!next.step(bytes)) return false;
  machine_ = next;
  return true;
}

}  // namespace ember::text
