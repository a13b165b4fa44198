// POST /tokenize and POST /detokenize, in llama.cpp's shapes: text to the served model's token
// ids and back, with the model's own tokenizer and no engine work.
//
//   /tokenize    {"content": str, "add_special": bool = false, "parse_special": bool = true,
//                 "with_pieces": bool = false}
//             -> {"tokens": [id, ...]}, or with_pieces {"tokens": [{"id": id, "piece": p}, ...]}
//                where p is the token's text, or its bytes as an array of numbers when they are
//                not valid UTF-8 on their own (part of a character)
//   /detokenize  {"tokens": [id, ...]} -> {"content": str}
//
// Both run on the connection's I/O thread, so their input is bounded (kMaxContentBytes,
// kMaxTokens: a 400 names the limit); the tokenizer is O(n log n) in the text.
#pragma once

#include <cstddef>
#include <string_view>

#include "server/server_impl.h"
#include "text/text_codec.h"

namespace ember::server {

struct TokenizeLimits {
  static constexpr size_t kMaxContentBytes = 1 << 20;  // /tokenize `content`, in bytes
  static constexpr size_t kMaxTokens = 1 << 18;        // /detokenize `tokens`, in ids
};

// The whole answer to a request body: 200, or 400 naming the field and the problem.
Reply tokenize_reply(const text::TextCodec& text, std::string_view body);
Reply detokenize_reply(const text::TextCodec& text, std::string_view body);

}  // namespace ember::server
