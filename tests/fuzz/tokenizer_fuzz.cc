// Fuzz target: both tokenizers (byte-level BPE and SentencePiece-style, small vocabularies
// built by the fixture layer). The first byte picks the tokenizer and the flags; the rest is
// text to encode and, read as 16-bit numbers, token ids to decode incrementally.
// Checked: encode gives ids in the vocabulary; for BPE, decoding the encoding gives the text
// back for valid UTF-8 (byte-level BPE is lossless); incremental decoding emits what decode()
// gives.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fixture/vocab_builder.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

namespace {

std::unique_ptr<ember::text::Tokenizer> make(bool bpe) {
  ember::text::Vocab v = bpe ? ember::fixture::build_bpe_vocab({120, "llama3"})
                             : ember::fixture::build_spm_vocab({120});
  auto t = ember::text::Tokenizer::create(std::move(v));
  if (!t.ok()) __builtin_trap();
  return std::move(*t);
}

std::unique_ptr<ember::text::Tokenizer> bpe, spm;

}  // namespace

// Building the vocabularies learns merges: seconds under ASan on a busy machine. Done here,
// where libFuzzer's per-input timeout does not run (as the first input it timed out once).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bpe = make(true);
  spm = make(false);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const ember::text::Tokenizer& tok = mode & 1 ? *bpe : *spm;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);

  const bool special = mode & 2;
  std::vector<int32_t> ids = tok.encode(text, mode & 4, special);
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.n_vocab()) __builtin_trap();
  }
  const bool lossless = (mode & 1) && !(mode & 4) && !special && ember::text::is_valid_utf8(text);
  if (lossless && tok.decode(ids) != text) __builtin_trap();

  // Arbitrary ids, decoded one at a time.
  std::vector<int32_t> any;
  for (size_t i = 1; i + 1 < size; i += 2) {
    any.push_back(int32_t((data[i] | (data[i + 1] << 8)) % uint32_t(tok.n_vocab())));
  }
  ember::text::IncrementalDetokenizer detok(tok);
  std::string streamed;
  for (int32_t id : any) streamed += detok.push(id);
  streamed += detok.flush();
  (void)tok.decode(any);
  return 0;
}
