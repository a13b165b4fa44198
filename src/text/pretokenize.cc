#include "text/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>

namespace ember::text {

namespace {

// Regex texts are facts about llama.cpp's tokenizer (src/llama-vocab.cpp); the case-insensitive
// contractions are spelled out as [sS] etc. so no Unicode case folding (e.g. U+017F) sneaks in.
constexpr const char* kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

// The tokenizer.ggml.pre values ember splits for, grouped by the regex stages they share: the
// one table behind regexes_for(), is_known() and the refusal's list. "default" is also what a
// vocabulary naming none gets.
struct Family {
  std::vector<std::string_view> names;
  std::vector<std::string> regexes;
  bool ignores_merges = false;  // the llama3 family emits a word that is a token as it is
};

const std::vector<Family>& families() {
  static const std::vector<Family> table = {
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"},
       {kLlama3},
       true},
      {{"dbrx", "smaug-bpe", "chatglm-bpe", "glm4"}, {kLlama3}},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2}},
      {{"gpt-2", "phi-2", "mpt", "olmo", "jais"}, {kGpt2}},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
       {"\\p{N}", kGpt2}},
      {{"falcon"}, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kGpt2, "[0-9][0-9][0-9]"}},
      {{"default"}, {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"}},
  };
  return table;
}

// The family `pre` names; "" is "default". Null for a name in no family.
const Family* family_of(std::string_view pre) {
  if (pre.empty()) pre = "default";
  for (const Family& f : families()) {
    for (std::string_view n : f.names) {
      if (n == pre) return &f;
    }
  }
  return nullptr;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

bool PreTokenizer::ignores_merges(std::string_view pre) {
  const Family* f = family_of(pre);
  return f != nullptr && f->ignores_merges;
}

bool PreTokenizer::is_known(std::string_view pre) {
  return !pre.empty() && family_of(pre) != nullptr;
}

std::vector<std::string> PreTokenizer::regexes_for(std::string_view pre) {
  const Family* f = family_of(pre);
  return (f != nullptr ? f : family_of("default"))->regexes;
}

Result<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  if (family_of(pre) == nullptr) {
    // Splitting with another family's regexes would tokenize differently from the model's
    // training, and its output would be wrong without a sign of it: refuse, as llama.cpp does.
    std::string known;
    for (const Family& f : families()) {
      for (std::string_view n : f.names) known += (known.empty() ? "" : ", ") + std::string(n);
    }
    return fail("pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; supported: {}",
                pre.substr(0, 64), known);
  }
  PreTokenizer p;
  for (const auto& rx : regexes_for(pre)) {
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rx.data()), rx.size(),
                                     PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> msg{};
      pcre2_get_error_message(err, msg.data(), msg.size());
      return fail("pre-tokenizer '{}': regex does not compile at offset {}: {}", pre, off,
                  reinterpret_cast<const char*>(msg.data()));
    }
    // JIT is an optimisation only: without it (or if it fails) the interpreter runs.
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    auto c = std::make_shared<Compiled>();
    c->code = code;
    p.stages_.push_back(std::move(c));
  }
  return p;
}

namespace {

// Appends the pieces of s: every match, and every run of text between matches.
void split_one(const pcre2_code* code, pcre2_match_data* md, std::string_view s,
               std::vector<std::string_view>& out) {
  const auto* subj = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t start = 0;
  while (start < s.size()) {
    int rc = pcre2_match(code, subj, s.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // e.g. the JIT stack ran out on a huge whitespace run: the interpreter uses the heap.
      rc = pcre2_match(code, subj, s.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t m0 = ov[0], m1 = ov[1];
    if (m0 > start) out.push_back(s.substr(start, m0 - start));
    if (m1 == m0) {  // an empty match: step over one character so the loop advances
      size_t n = 1;
      while (m0 + n < s.size() && (static_cast<uint8_t>(s[m0 + n]) & 0xC0) == 0x80) ++n;
      out.push_back(s.substr(m0, n));
      m1 = m0 + n;
    } else {
      out.push_back(s.substr(m0, m1 - m0));
    }
    start = m1;
  }
  if (start < s.size()) out.push_back(s.substr(start));
}

}  // namespace

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::vector<std::string_view> next;
  for (const auto& st : stages_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(st->code, nullptr);
    next.clear();
    for (auto p : pieces) split_one(st->code, md, p, next);
    pcre2_match_data_free(md);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace ember::text
