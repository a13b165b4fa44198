#include "server/tokenize.h"

#include <nlohmann/json.hpp>

#include "server/openai_request.h"
#include "server/sse.h"
#include "text/unicode.h"

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;  // the request, as parse_json_bounded reads it
using out_json = nlohmann::json;      // the answer (dump_json)

ApiError bad(const char* param, std::string message) {
  return ApiError{ErrorKind::InvalidRequest, std::move(message), std::string(param)};
}

ApiError bad_type(const char* param, std::string message) {
  return ApiError{ErrorKind::InvalidType, std::move(message), std::string(param)};
}

// The body as a JSON object, or the error that answers it.
std::variant<json, ApiError> parse_object(std::string_view body) {
  auto parsed = parse_json_body(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  json& j = std::get<json>(parsed);
  if (!j.is_object()) {
    return ApiError{ErrorKind::InvalidRequest,
                    fmt::format("the request body must be a JSON object, got {}", j.type_name()),
                    std::nullopt};
  }
  return std::move(j);
}

// An optional boolean member (absent or null: `def`).
std::optional<ApiError> read_bool(const json& j, const char* key, bool def, bool* out) {
  *out = def;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    return bad_type(key, fmt::format("'{}' must be a boolean, got {}", key, it->type_name()));
  }
  *out = it->get<bool>();
  return std::nullopt;
}

Reply json_reply(const out_json& j) {
  return {http::status::ok, "application/json", dump_json(j), 0, {}};
}

std::variant<Reply, ApiError> tokenize(const text::TextCodec& text, std::string_view body) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  auto it = j.find("content");
  if (it == j.end() || it->is_null()) return bad("content", "'content' is required");
  if (!it->is_string()) {
    return bad_type("content", fmt::format("'content' must be a string, got {}", it->type_name()));
  }
  const std::string& content = it->get_ref<const std::string&>();
  if (content.size() > TokenizeLimits::kMaxContentBytes) {
    return bad("content", fmt::format("'content' is {} bytes; the limit is {} bytes",
                                      content.size(), TokenizeLimits::kMaxContentBytes));
  }
  bool add_special = false, parse_special = true, with_pieces = false;
  if (auto e = read_bool(j, "add_special", false, &add_special)) return *e;
  if (auto e = read_bool(j, "parse_special", true, &parse_special)) return *e;
  if (auto e = read_bool(j, "with_pieces", false, &with_pieces)) return *e;
  const text::Tokenizer& tok = text.tokenizer();
  std::vector<int32_t> ids = tok.encode(content, add_special, parse_special);
  // Written out directly: a JSON object per token would cost more than the tokenizing.
  std::string out = R"({"tokens":[)";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    if (!with_pieces) {
      fmt::format_to(std::back_inserter(out), "{}", ids[i]);
      continue;
    }
    fmt::format_to(std::back_inserter(out), R"({{"id":{},"piece":)", ids[i]);
    std::string piece = tok.token_to_piece(ids[i], true);
    if (text::is_valid_utf8(piece)) {
      out += dump_json(out_json(piece));
    } else {
      out += '[';
      for (size_t k = 0; k < piece.size(); ++k) {
        fmt::format_to(std::back_inserter(out), "{}{}", k > 0 ? "," : "",
                       static_cast<unsigned char>(piece[k]));
      }
      out += ']';
    }
    out += '}';
  }
  out += "]}";
  return Reply{http::status::ok, "application/json", std::move(out), 0, {}};
}

std::variant<Reply, ApiError> detokenize(const text::TextCodec& text, std::string_view body) {
  auto parsed = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
  auto it = j.find("tokens");
  if (it == j.end() || it->is_null()) return bad("tokens", "'tokens' is required");
  if (!it->is_array()) {
    return bad_type("tokens",
                    fmt::format("'tokens' must be an array of token ids, got {}", it->type_name()));
  }
  if (it->size() > TokenizeLimits::kMaxTokens) {
    return bad("tokens", fmt::format("'tokens' holds {} ids; the limit is {}", it->size(),
                                     TokenizeLimits::kMaxTokens));
  }
  const text::Tokenizer& tok = text.tokenizer();
  const int64_t n_vocab = tok.n_vocab();
  std::vector<int32_t> ids;
  ids.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer()) {
      return bad_type("tokens", fmt::format("'tokens[{}]' must be an integer token id, got {}", i,
                                            v.type_name()));
    }
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() < static_cast<uint64_t>(n_vocab)
                              : v.get<int64_t>() >= 0 && v.get<int64_t>() < n_vocab;
    if (!in_range) {
      return bad("tokens", fmt::format("'tokens[{}]' is {}, not a token id of this model "
                                       "(0 to {})",
                                       i, v.dump(), n_vocab - 1));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  // Special tokens are written out as their text, as llama.cpp's /detokenize does.
  // Bytes that are not valid UTF-8 (part of a character) come back as U+FFFD.
  return json_reply(out_json{{"content", tok.decode(ids, true)}});
}

Reply answer(std::variant<Reply, ApiError> r) {
  if (auto* e = std::get_if<ApiError>(&r)) return error_reply(*e);
  return std::move(std::get<Reply>(r));
}

}  // namespace

Reply tokenize_reply(const text::TextCodec& text, std::string_view body) {
  return answer(tokenize(text, body));
}

Reply detokenize_reply(const text::TextCodec& text, std::string_view body) {
  return answer(detokenize(text, body));
}

}  // namespace ember::server
