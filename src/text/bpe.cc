// Byte-level BPE (tokenizer.ggml.model "gpt2"), following llama.cpp's algorithm step for step
// so ids match: special-token partition, regex pre-tokenization, GPT-2 byte encoding, then per
// word a priority queue of adjacent pairs by merge rank (ties: leftmost first).
#include <queue>

#include "text/pretokenize.h"
#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace ember::text::detail {

namespace {

class BpeTokenizer final : public Tokenizer {
 public:
  BpeTokenizer(Vocab v, PreTokenizer pre)
      : Tokenizer(std::move(v)),
        pre_(std::move(pre)),
        ignore_merges_(PreTokenizer::ignores_merges(vocab_.pre)),
        token_map_(build_token_map(vocab_)),
        specials_(vocab_) {
    ranks_.reserve(vocab_.merges.size());
    for (size_t i = 0; i < vocab_.merges.size(); ++i) {
      // The first occurrence of a pair keeps its rank.
      ranks_.emplace(vocab_.merges[i], static_cast<int32_t>(i));
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
    for (const auto& fr : specials_.split(text, parse_special)) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
      } else {
        encode_raw(fr.text, out);
      }
    }
    if (add_special && vocab_.add_eos) out.push_back(vocab_.eos);
    return out;
  }

  std::string text_piece(int32_t id) const override { return decode_bytes(vocab_.tokens[id]); }

 private:
  struct Symbol {
    uint32_t off, n;
    int32_t prev, next;
  };
  struct Pair {
    int32_t rank, left, right;
    uint32_t n_left, n_right;  // lengths when queued: a changed length means a stale pair
    bool operator<(const Pair& o) const {  // priority_queue pops the "largest"
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };

  // GPT-2 characters back to the bytes they stand for; a character outside the mapping is
  // kept as its own UTF-8.
  static std::string decode_bytes(std::string_view t) {
    std::string out;
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      const int n = utf8_char_at(t, i);
      if (n <= 0) {
        out += t[i++];
        continue;
      }
      uint32_t cp = static_cast<uint8_t>(t[i]);
      if (n > 1) {
        cp &= (0x7F >> n);
        for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(t[i + k]) & 0x3F);
      }
      const int b = unicode_to_byte(cp);
      if (b >= 0) {
        out += static_cast<char>(b);
      } else {
        out.append(t.data() + i, n);
      }
      i += n;
    }
    return out;
  }

  int32_t find_token(std::string_view s) const {
    auto it = token_map_.find(s);
    return it == token_map_.end() ? -1 : it->second;
  }

  void encode_raw(std::string_view raw, std::vector<int32_t>& out) const {
    const std::string text = sanitize_utf8(raw);
    std::string word, key;
    std::vector<Symbol> syms;
    for (std::string_view piece : pre_.split(text)) {
      word.clear();
      for (char c : piece) word += byte_to_unicode(static_cast<uint8_t>(c));
      if (ignore_merges_) {
        if (int32_t id = find_token(word); id >= 0) {
          out.push_back(id);
          continue;
        }
      }
      merge_word(word, syms, key);
      for (int32_t i = 0; i != -1; i = syms[i].next) {
        const std::string_view s(word.data() + syms[i].off, syms[i].n);
        if (int32_t id = find_token(s); id >= 0) {
          out.push_back(id);
          continue;
        }
        // A merge result missing from the vocabulary: fall back to its characters' tokens.
        for (size_t k = 0; k < s.size();) {
          const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(s[k])), s.size() - k);
          if (int32_t id = find_token(s.substr(k, n)); id >= 0) out.push_back(id);
          k += n;
        }
      }
    }
  }

  void merge_word(const std::string& word, std::vector<Symbol>& syms, std::string& key) const {
    syms.clear();
    for (size_t off = 0; off < word.size();) {
      const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(word[off])), word.size() - off);
      const auto idx = static_cast<int32_t>(syms.size());
      syms.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(n), idx - 1,
                      off + n == word.size() ? -1 : idx + 1});
      off += n;
    }
    std::priority_queue<Pair> queue;
    auto try_pair = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      key.assign(word, syms[l].off, syms[l].n);
      key += ' ';
      key.append(word, syms[r].off, syms[r].n);
      auto it = ranks_.find(key);
      if (it == ranks_.end()) return;
      queue.push({it->second, l, r, syms[l].n, syms[r].n});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Symbol& l = syms[p.left];
      Symbol& r = syms[p.right];
      if (l.n == 0 || r.n == 0 || l.n != p.n_left || r.n != p.n_right) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = p.left;
      try_pair(l.prev, p.left);
      try_pair(p.left, l.next);
    }
  }

  PreTokenizer pre_;
  bool ignore_merges_;
  TokenMap token_map_;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> ranks_;
  SpecialSplitter specials_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_bpe_tokenizer(Vocab v) {
  EMBER_TRY(PreTokenizer pre, PreTokenizer::create(v.pre));
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(v), std::move(pre)));
}

}  // namespace ember::text::detail
