#include "server/openai_request.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace ember::server {
namespace {

using json = nlohmann::json;

ApiError bad(std::string param, std::string message) {
  return ApiError{ErrorKind::InvalidRequest, std::move(message), std::move(param)};
}

const char* type_name(const json& v) {
  return v.type_name();
}

// Each reader returns an error message (empty: ok) so the caller can stop at the first problem.
std::optional<ApiError> read_number(const json& body, const char* key, double lo, double hi,
                                    float* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) {
    return bad(key, fmt::format("'{}' must be a number, got {}", key, type_name(*it)));
  }
  double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v));
  }
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> read_int(const json& body, const char* key, int64_t lo, int64_t hi,
                                 std::optional<int64_t>* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return bad(key, fmt::format("'{}' must be an integer, got {}", key, type_name(*it)));
  }
  int64_t v = it->is_number_unsigned()
                  ? static_cast<int64_t>(std::min<uint64_t>(it->get<uint64_t>(), INT64_MAX))
                  : it->get<int64_t>();
  if (v < lo || v > hi) {
    return bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, v));
  }
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    return bad(key, fmt::format("'{}' must be a boolean, got {}", key, type_name(*it)));
  }
  *out = it->get<bool>();
  return std::nullopt;
}

// Chat content is a string or an array of {"type":"text","text":...} parts.
std::optional<ApiError> read_content(const json& v, size_t index, std::string* out) {
  std::string param = fmt::format("messages[{}].content", index);
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (v.is_array()) {
    for (const json& part : v) {
      if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
          !part["text"].is_string()) {
        return ApiError{ErrorKind::Unsupported,
                        fmt::format("'{}': only text content parts are supported", param), param};
      }
      *out += part["text"].get<std::string>();
    }
    return std::nullopt;
  }
  return bad(param, fmt::format("'{}' must be a string or an array of text parts, got {}", param,
                                type_name(v)));
}

std::optional<ApiError> read_messages(const json& body, std::vector<Message>* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return bad("messages", "'messages' is required");
  if (!it->is_array()) {
    return bad("messages", fmt::format("'messages' must be an array, got {}", type_name(*it)));
  }
  if (it->empty()) return bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object()) {
      return bad(fmt::format("messages[{}]", i),
                 fmt::format("'messages[{}]' must be an object, got {}", i, type_name(m)));
    }
    Message msg;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return bad(fmt::format("messages[{}].role", i),
                 fmt::format("'messages[{}].role' must be a string", i));
    }
    msg.role = role->get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "developer" && msg.role != "tool") {
      return bad(fmt::format("messages[{}].role", i),
                 fmt::format("'messages[{}].role' is '{}'; expected system, developer, user or "
                             "assistant",
                             i, msg.role));
    }
    if (msg.role == "developer") msg.role = "system";
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      return ApiError{ErrorKind::Unsupported, "'tool_calls' in messages is not supported yet",
                      fmt::format("messages[{}].tool_calls", i)};
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      return bad(fmt::format("messages[{}].content", i),
                 fmt::format("'messages[{}].content' is required", i));
    }
    if (auto e = read_content(*content, i, &msg.content)) return e;
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

std::optional<ApiError> read_prompt(const json& body, std::string* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad("prompt", "'prompt' is required");
  if (it->is_string()) {
    *out = it->get<std::string>();
    return std::nullopt;
  }
  if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
    *out = (*it)[0].get<std::string>();
    return std::nullopt;
  }
  if (it->is_array()) {
    return ApiError{ErrorKind::Unsupported,
                    "'prompt' as an array of several prompts or of token ids is not supported yet",
                    "prompt"};
  }
  return bad("prompt", fmt::format("'prompt' must be a string, got {}", type_name(*it)));
}

std::optional<ApiError> read_stop(const json& body, std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) out->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) {
    return bad("stop", fmt::format("'stop' must be a string or an array of strings, got {}",
                                   type_name(*it)));
  }
  if (it->size() > 4) return bad("stop", "'stop' may hold at most 4 strings");
  for (const json& s : *it) {
    if (!s.is_string()) return bad("stop", "'stop' must hold only strings");
    if (!s.get<std::string>().empty()) out->push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<ApiError> reject_unsupported(const json& body) {
  auto present = [&](const char* key) {
    auto it = body.find(key);
    return it != body.end() && !it->is_null();
  };
  if (present("n")) {
    auto it = body.find("n");
    if (!it->is_number_integer()) {
      return bad("n", fmt::format("'n' must be an integer, got {}", type_name(*it)));
    }
    if (it->get<int64_t>() != 1) {
      return ApiError{ErrorKind::Unsupported, "'n' other than 1 is not supported yet", "n"};
    }
  }
  for (const char* key : {"tools", "functions", "tool_choice", "function_call"}) {
    if (present(key)) {
      const json& v = body[key];
      bool empty = (v.is_array() && v.empty()) || (v.is_string() && v == "none");
      if (!empty) {
        return ApiError{ErrorKind::Unsupported, fmt::format("'{}' is not supported yet", key), key};
      }
    }
  }
  if (present("response_format")) {
    const json& v = body["response_format"];
    if (!v.is_object() || v.value("type", "text") != "text") {
      return ApiError{ErrorKind::Unsupported,
                      "'response_format' other than {\"type\": \"text\"} is not supported yet",
                      "response_format"};
    }
  }
  if (present("best_of")) {
    auto it = body.find("best_of");
    if (!it->is_number_integer() || it->get<int64_t>() != 1) {
      return ApiError{ErrorKind::Unsupported, "'best_of' other than 1 is not supported yet",
                      "best_of"};
    }
  }
  if (present("suffix")) {
    return ApiError{ErrorKind::Unsupported, "'suffix' is not supported yet", "suffix"};
  }
  if (present("logit_bias") && body["logit_bias"].is_object() && !body["logit_bias"].empty()) {
    return ApiError{ErrorKind::Unsupported, "'logit_bias' is not supported yet", "logit_bias"};
  }
  return std::nullopt;
}

std::optional<ApiError> parse_into(const json& body, Endpoint endpoint, CompletionRequest* r) {
  if (!body.is_object()) {
    return bad("", fmt::format("request body must be a JSON object, got {}", type_name(body)));
  }
  if (auto e = reject_unsupported(body)) return e;
  auto model = body.find("model");
  if (model == body.end() || model->is_null()) return bad("model", "'model' is required");
  if (!model->is_string()) {
    return bad("model", fmt::format("'model' must be a string, got {}", type_name(*model)));
  }
  r->model = model->get<std::string>();
  if (endpoint == Endpoint::Chat) {
    if (auto e = read_messages(body, &r->messages)) return e;
  } else {
    if (auto e = read_prompt(body, &r->prompt)) return e;
  }
  if (auto e = read_bool(body, "stream", &r->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return bad("stream_options", "'stream_options' must be an object");
    }
    if (auto e = read_bool(*it, "include_usage", &r->include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  // `null` means unset for every optional field: a null max_completion_tokens leaves
  // max_tokens in force (clients serialise unset fields as null).
  std::optional<int64_t> n;
  if (auto e = read_int(body, "max_tokens", 1, INT32_MAX, &n)) return e;
  if (auto e = read_int(body, "max_completion_tokens", 1, INT32_MAX, &n)) return e;
  if (n) r->max_tokens = static_cast<int32_t>(*n);

  worker::SamplingParams& s = r->sampling;
  if (auto e = read_number(body, "temperature", 0, 2, &s.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0, 1, &s.top_p)) return e;
  if (auto e = read_number(body, "min_p", 0, 1, &s.min_p)) return e;
  if (auto e = read_number(body, "presence_penalty", -2, 2, &s.presence_penalty)) return e;
  if (auto e = read_number(body, "frequency_penalty", -2, 2, &s.frequency_penalty)) return e;
  if (auto e = read_number(body, "repetition_penalty", 0.01, 10, &s.repeat_penalty)) return e;
  if (auto e = read_number(body, "repeat_penalty", 0.01, 10, &s.repeat_penalty)) return e;
  n.reset();
  if (auto e = read_int(body, "top_k", 0, INT32_MAX, &n)) return e;
  if (n) s.top_k = static_cast<int32_t>(*n);
  n.reset();
  if (auto e = read_int(body, "seed", INT64_MIN, INT64_MAX, &n)) return e;
  if (n) s.seed = static_cast<uint64_t>(*n);
  if (auto e = read_stop(body, &r->stop)) return e;

  if (endpoint == Endpoint::Chat) {
    if (auto e = read_bool(body, "logprobs", &r->logprobs)) return e;
    n.reset();
    if (auto e = read_int(body, "top_logprobs", 0, 20, &n)) return e;
    if (n) {
      if (!r->logprobs && *n > 0) {
        return bad("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
      }
      r->top_logprobs = static_cast<int32_t>(*n);
    }
  } else {
    n.reset();
    if (auto e = read_int(body, "logprobs", 0, 5, &n)) return e;
    if (n) {
      r->logprobs = true;
      r->top_logprobs = static_cast<int32_t>(*n);
    }
    if (auto e = read_bool(body, "echo", &r->echo)) return e;
    if (r->echo) return ApiError{ErrorKind::Unsupported, "'echo' is not supported yet", "echo"};
  }
  s.top_logprobs = r->top_logprobs;
  if (auto it = body.find("user"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad("user", "'user' must be a string");
    r->user = it->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   Endpoint endpoint) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return ApiError{ErrorKind::InvalidJson, "request body is not valid JSON", std::nullopt};
  }
  CompletionRequest r;
  r.endpoint = endpoint;
  try {
    if (auto e = parse_into(j, endpoint, &r)) return *e;
  } catch (const json::exception& e) {  // a type we did not check: still the client's fault
    return ApiError{ErrorKind::InvalidRequest, std::string("invalid request: ") + e.what(), {}};
  }
  return r;
}

}  // namespace ember::server
