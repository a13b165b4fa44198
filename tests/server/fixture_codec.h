// A TextCodec on the fixture byte-level BPE vocabulary (fixture/vocab_builder.h) for the server
// tests: ChatML fallback template (Hermes tool calls), no default system prompt.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "fixture/vocab_builder.h"
#include "text/text_codec.h"

namespace ember::server::testing {

inline std::unique_ptr<text::TextCodec> make_fixture_codec(bool add_bos = false) {
  text::Vocab v = fixture::build_bpe_vocab({});
  v.chat_template.clear();
  v.add_bos = add_bos;
  auto tok = text::Tokenizer::create(std::move(v));
  EXPECT_TRUE(tok.ok()) << tok.message();
  auto c = text::TextCodec::create(std::shared_ptr<const text::Tokenizer>(std::move(tok).value()),
                                   {"llama", ""});
  EXPECT_TRUE(c.ok()) << c.message();
  return std::move(c).value();
}

// One codec per test binary.
inline const text::TextCodec& fixture_codec() {
  static const std::unique_ptr<text::TextCodec> c = make_fixture_codec();
  return *c;
}

}  // namespace ember::server::testing
