// SentencePiece-style tokenizer (tokenizer.ggml.model "llama", e.g. Gemma 3), following
// llama.cpp's "SPM" algorithm so ids match: spaces become U+2581, then adjacent symbols merge
// while their concatenation is a token, highest score first (ties: leftmost); a symbol that is
// not a token is emitted as its bytes (<0xNN> tokens).
#include <array>
#include <cctype>
#include <queue>

#include "text/tokenizer_impl.h"
#include "text/unicode.h"

namespace ember::text::detail {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581

class SpmTokenizer final : public Tokenizer {
 public:
  explicit SpmTokenizer(Vocab v)
      : Tokenizer(std::move(v)), token_map_(build_token_map(vocab_)), specials_(vocab_) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[7] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>', 0};
      int32_t id = find_token(name);
      if (id < 0) id = find_token(std::string(1, static_cast<char>(b)));
      byte_tokens_[b] = id >= 0 ? id : vocab_.unk;
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && vocab_.add_bos) out.push_back(vocab_.bos);
    bool prev_special = true;  // a space prefix goes at the start and after special tokens
    std::string buf;
    for (const auto& fr : specials_.split(text, parse_special)) {
      if (fr.token >= 0) {
        out.push_back(fr.token);
        prev_special = true;
        continue;
      }
      buf.clear();
      if (vocab_.add_space_prefix && prev_special) buf += kSpaceMarker;
      for (char c : fr.text) {
        if (c == ' ') {
          buf += kSpaceMarker;
        } else {
          buf += c;
        }
      }
      encode_raw(buf, out);
      prev_special = false;
    }
    if (add_special && vocab_.add_eos) out.push_back(vocab_.eos);
    return out;
  }

  std::string text_piece(int32_t id) const override {
    const std::string& t = vocab_.tokens[id];
    if (vocab_.types[id] == TokenType::Byte) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && std::isxdigit(uint8_t(t[3])) &&
          std::isxdigit(uint8_t(t[4])) && t[5] == '>') {
        return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
      }
      return t;
    }
    std::string out;  // Normal: the space marker stands for a space
    out.reserve(t.size());
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, kSpaceMarker.size(), kSpaceMarker) == 0) {
        out += ' ';
        i += kSpaceMarker.size();
      } else {
        out += t[i++];
      }
    }
    return out;
  }

 private:
  struct Symbol {
    uint32_t off, n;
    int32_t prev, next;
  };
  struct Pair {
    float score;
    int32_t left, right;
    uint32_t size;  // bytes of the merged text when queued; a different sum means stale
    bool operator<(const Pair& o) const {  // priority_queue pops the "largest"
      return score != o.score ? score < o.score : left > o.left;
    }
  };

  int32_t find_token(std::string_view s) const {
    auto it = token_map_.find(s);
    return it == token_map_.end() ? -1 : it->second;
  }

  void encode_raw(const std::string& text, std::vector<int32_t>& out) const {
    std::vector<Symbol> syms;
    syms.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
      const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(text[off])), text.size() - off);
      const auto idx = static_cast<int32_t>(syms.size());
      syms.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(n), idx - 1,
                      off + n == text.size() ? -1 : idx + 1});
      off += n;
    }
    if (syms.empty()) return;
    std::priority_queue<Pair> queue;
    auto try_pair = [&](int32_t l, int32_t r) {
      if (l < 0 || r < 0) return;
      const uint32_t size = syms[l].n + syms[r].n;
      const int32_t id = find_token(std::string_view(text.data() + syms[l].off, size));
      if (id < 0) return;
      queue.push({vocab_.scores.empty() ? 0.0f : vocab_.scores[id], l, r, size});
    };
    for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_pair(i - 1, i);
    while (!queue.empty()) {
      const Pair p = queue.top();
      queue.pop();
      Symbol& l = syms[p.left];
      Symbol& r = syms[p.right];
      if (l.n == 0 || r.n == 0 || l.n + r.n != p.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) syms[r.next].prev = p.left;
      try_pair(l.prev, p.left);
      try_pair(p.left, l.next);
    }
    // Every merge produced a token, so a symbol is either a token or one unknown character,
    // which goes out as its bytes.
    for (int32_t i = 0; i != -1; i = syms[i].next) {
      const std::string_view s(text.data() + syms[i].off, syms[i].n);
      if (int32_t id = find_token(s); id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : s) {
        const int32_t id = byte_tokens_[static_cast<uint8_t>(c)];
        if (id >= 0) out.push_back(id);
      }
    }
  }

  TokenMap token_map_;
  SpecialSplitter specials_;
  std::array<int32_t, 256> byte_tokens_{};
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_spm_tokenizer(Vocab v) {
  return std::unique_ptr<Tokenizer>(new SpmTokenizer(std::move(v)));
}

}  // namespace ember::text::detail
