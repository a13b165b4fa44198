#include "server/openai_request.h"

#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "text/json_limits.h"

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;

ApiError bad(std::string param, std::string message) {
  return ApiError{ErrorKind::InvalidRequest, std::move(message), std::move(param)};
}

// A field of the wrong JSON type (code invalid_type, as OpenAI answers it).
ApiError bad_type(std::string param, std::string message) {
  return ApiError{ErrorKind::InvalidType, std::move(message), std::move(param)};
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
    return bad_type(key, fmt::format("'{}' must be a number, got {}", key, type_name(*it)));
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
    return bad_type(key, fmt::format("'{}' must be an integer, got {}", key, type_name(*it)));
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
    return bad_type(key, fmt::format("'{}' must be a boolean, got {}", key, type_name(*it)));
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
  return bad_type(param, fmt::format("'{}' must be a string or an array of text parts, got {}",
                                     param, type_name(v)));
}

// An assistant message's tool_calls (or legacy function_call), replayed in the history.
std::optional<ApiError> read_tool_calls(const json& m, size_t i, Message* msg) {
  std::string param = fmt::format("messages[{}].tool_calls", i);
  std::vector<json> calls;
  if (auto fc = m.find("function_call"); fc != m.end() && !fc->is_null()) {
    calls.push_back({{"id", fmt::format("call_{}", i)}, {"type", "function"}, {"function", *fc}});
    param = fmt::format("messages[{}].function_call", i);
  }
  if (auto tc = m.find("tool_calls"); tc != m.end() && !tc->is_null()) {
    if (!tc->is_array()) return bad_type(param, fmt::format("'{}' must be an array", param));
    for (const json& c : *tc) calls.push_back(c);
  }
  for (size_t k = 0; k < calls.size(); ++k) {
    const json& c = calls[k];
    auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object() || !fn->contains("name") ||
        !(*fn)["name"].is_string()) {
      return bad(param, fmt::format("'{}[{}]' must be an object with function.name", param, k));
    }
    ToolCallIn call;
    call.id = c.value("id", fmt::format("call_{}_{}", i, k));
    call.name = (*fn)["name"].get<std::string>();
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      call.arguments = "{}";
    } else if (args->is_string()) {
      call.arguments = args->get<std::string>();
    } else {
      call.arguments = args->dump();
    }
    msg->tool_calls.push_back(std::move(call));
  }
  return std::nullopt;
}

std::optional<ApiError> read_messages(const json& body, std::vector<Message>* out) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return bad("messages", "'messages' is required");
  if (!it->is_array()) {
    return bad_type("messages", fmt::format("'messages' must be an array, got {}", type_name(*it)));
  }
  if (it->empty()) return bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    if (!m.is_object()) {
      return bad_type(fmt::format("messages[{}]", i),
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
        msg.role != "developer" && msg.role != "tool" && msg.role != "function") {
      return bad(fmt::format("messages[{}].role", i),
                 fmt::format("'messages[{}].role' is '{}'; expected system, developer, user, "
                             "assistant or tool",
                             i, msg.role));
    }
    if (msg.role == "developer") msg.role = "system";
    if (msg.role == "function") msg.role = "tool";  // legacy function results
    if (msg.role == "assistant") {
      if (auto e = read_tool_calls(m, i, &msg)) return e;
    }
    if (msg.role == "tool") {
      if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string()) {
        msg.tool_call_id = id->get<std::string>();
      }
      if (auto name = m.find("name"); name != m.end() && name->is_string()) {
        msg.name = name->get<std::string>();
      }
    }
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (!msg.tool_calls.empty()) {  // an assistant turn that only called tools
        out->push_back(std::move(msg));
        continue;
      }
      return bad(fmt::format("messages[{}].content", i),
                 fmt::format("'messages[{}].content' is required", i));
    }
    if (auto e = read_content(*content, i, &msg.content)) return e;
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

// A prompt is a string, an array of strings, an array of token ids, or an array of such arrays.
std::optional<ApiError> read_prompt(const json& body, std::vector<Prompt>* out) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return bad("prompt", "'prompt' is required");
  auto tokens = [](const json& a, Prompt* p) -> std::optional<ApiError> {
    p->is_tokens = true;
    for (const json& t : a) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
        return bad("prompt", "'prompt' token ids must be non-negative integers");
      }
      p->tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return std::nullopt;
  };
  if (it->is_string()) {
    out->push_back({it->get<std::string>(), {}, false});
    return std::nullopt;
  }
  if (!it->is_array()) {
    return bad_type("prompt",
                    fmt::format("'prompt' must be a string, an array of strings or of token "
                                "ids, got {}",
                                type_name(*it)));
  }
  if (it->empty()) return bad("prompt", "'prompt' must not be an empty array");
  if ((*it)[0].is_number()) {
    Prompt p;
    if (auto e = tokens(*it, &p)) return e;
    out->push_back(std::move(p));
    return std::nullopt;
  }
  const bool strings = (*it)[0].is_string();
  for (const json& v : *it) {
    Prompt p;
    if (v.is_string() != strings) {
      return bad("prompt", "'prompt' arrays must hold only strings or only token-id arrays");
    }
    if (v.is_string()) {
      p.text = v.get<std::string>();
    } else if (v.is_array() && !v.empty()) {
      if (auto e = tokens(v, &p)) return e;
    } else {
      return bad("prompt", "'prompt' arrays must hold only strings or only token-id arrays");
    }
    out->push_back(std::move(p));
  }
  if (out->size() > 64) return bad("prompt", "'prompt' may hold at most 64 prompts");
  return std::nullopt;
}

std::optional<ApiError> read_stop(const json& body, std::vector<std::string>* out) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    if (!it->get<std::string>().empty()) out->push_back(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) {
    return bad_type("stop", fmt::format("'stop' must be a string or an array of strings, got {}",
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
  if (present("best_of")) {
    auto it = body.find("best_of");
    if (!it->is_number_integer() || it->get<int64_t>() != 1) {
      return ApiError{ErrorKind::Unsupported, "'best_of' other than 1 is not supported", "best_of"};
    }
  }
  if (present("suffix")) {
    return ApiError{ErrorKind::Unsupported, "'suffix' is not supported", "suffix"};
  }
  return std::nullopt;
}

// logit_bias: {"token id": bias in [-100, 100]}.
std::optional<ApiError> read_logit_bias(const json& body, engine::SamplingParams* s) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return bad_type("logit_bias", "'logit_bias' must be an object");
  if (it->size() > 1024) return bad("logit_bias", "'logit_bias' may hold at most 1024 tokens");
  for (auto e = it->begin(); e != it->end(); ++e) {
    char* end = nullptr;
    long long id = std::strtoll(e.key().c_str(), &end, 10);
    if (e.key().empty() || *end != '\0' || id < 0 || id > INT32_MAX) {
      return bad("logit_bias",
                 fmt::format("'logit_bias' keys must be token ids, got '{}'", e.key()));
    }
    if (!e->is_number() || e->get<double>() < -100 || e->get<double>() > 100) {
      return bad("logit_bias",
                 fmt::format("'logit_bias' values must be numbers in [-100, 100] (token {})", id));
    }
    s->logit_bias.emplace_back(static_cast<int32_t>(id), e->get<float>());
  }
  return std::nullopt;
}

// A function definition ({name, description?, parameters?}), from `tools` or `functions`.
std::optional<ApiError> check_function(const json& f, const std::string& param) {
  if (!f.is_object() || !f.contains("name") || !f["name"].is_string() ||
      f["name"].get<std::string>().empty()) {
    return bad(param, fmt::format("'{}' must be an object with a non-empty 'name'", param));
  }
  if (auto p = f.find("parameters"); p != f.end() && !p->is_null() && !p->is_object()) {
    return bad(param, fmt::format("'{}.parameters' must be a JSON schema object", param));
  }
  return std::nullopt;
}

std::optional<ApiError> read_tools(const json& body, CompletionRequest* r) {
  auto get = [&](const char* key) -> const json* {
    auto it = body.find(key);
    return it == body.end() || it->is_null() ? nullptr : &*it;
  };
  const json* tools = get("tools");
  const json* functions = get("functions");
  json normalized = json::array();
  if (tools) {
    if (!tools->is_array()) return bad_type("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      std::string param = fmt::format("tools[{}]", i);
      if (!t.is_object() || t.value("type", "function") != "function") {
        return ApiError{ErrorKind::Unsupported,
                        fmt::format("'{}': only tools of type 'function' are supported", param),
                        param};
      }
      if (auto e = check_function(t.value("function", json()), param + ".function")) return e;
      normalized.push_back({{"type", "function"}, {"function", t["function"]}});
    }
  } else if (functions) {
    if (!functions->is_array()) return bad_type("functions", "'functions' must be an array");
    for (size_t i = 0; i < functions->size(); ++i) {
      const json& f = (*functions)[i];
      if (auto e = check_function(f, fmt::format("functions[{}]", i))) return e;
      normalized.push_back({{"type", "function"}, {"function", f}});
    }
    r->legacy_functions = true;
  }
  if (!normalized.empty()) r->tools = std::move(normalized);
  const char* choice_key = get("tool_choice") ? "tool_choice" : "function_call";
  const json* choice = get(choice_key);
  if (!choice) return std::nullopt;
  if (choice->is_string()) {
    std::string c = choice->get<std::string>();
    if (c == "none") {
      r->tool_choice = ToolChoice::None;
    } else if (c == "auto") {
      r->tool_choice = ToolChoice::Auto;
    } else if (c == "required" && std::string_view(choice_key) == "tool_choice") {
      r->tool_choice = ToolChoice::Required;
    } else {
      return bad(choice_key, fmt::format("'{}' must be none, auto, required or a named function, "
                                         "got '{}'",
                                         choice_key, c));
    }
  } else if (choice->is_object()) {
    const json* fn = choice->contains("function") ? &(*choice)["function"] : choice;
    if (!fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return bad(choice_key, fmt::format("'{}' names a function as {{\"type\": \"function\", "
                                         "\"function\": {{\"name\": ...}}}}",
                                         choice_key));
    }
    r->tool_choice = ToolChoice::Named;
    r->tool_choice_name = (*fn)["name"].get<std::string>();
  } else {
    return bad_type(choice_key, fmt::format("'{}' must be a string or an object", choice_key));
  }
  if (r->tool_choice == ToolChoice::Required || r->tool_choice == ToolChoice::Named) {
    if (r->tools.is_null()) {
      return bad(choice_key,
                 fmt::format("'{}' asks for a tool call but no tools are given", choice_key));
    }
  }
  if (r->tool_choice == ToolChoice::Named) {
    bool found = false;
    for (const json& t : r->tools) found = found || t["function"]["name"] == r->tool_choice_name;
    if (!found) {
      return bad(choice_key, fmt::format("'{}' names '{}', which is not among the tools",
                                         choice_key, r->tool_choice_name));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> read_response_format(const json& body, CompletionRequest* r) {
  auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
    return bad("response_format", "'response_format' must be an object with a 'type'");
  }
  std::string type = (*it)["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    r->response_format = ResponseFormat::JsonObject;
    return std::nullopt;
  }
  if (type == "json_schema") {
    auto js = it->find("json_schema");
    if (js == it->end() || !js->is_object()) {
      return bad("response_format.json_schema",
                 "'response_format.json_schema' must be an object with a 'schema'");
    }
    auto schema = js->find("schema");
    r->response_format = ResponseFormat::JsonSchema;
    r->json_schema = schema == js->end() || schema->is_null() ? json::object() : *schema;
    if (!r->json_schema.is_object() && !r->json_schema.is_boolean()) {
      return bad("response_format.json_schema.schema",
                 "'response_format.json_schema.schema' must be a JSON schema object");
    }
    return std::nullopt;
  }
  return bad("response_format",
             fmt::format("'response_format.type' must be text, json_object or json_schema, got "
                         "'{}'",
                         type));
}

std::optional<ApiError> parse_into(const json& body, Endpoint endpoint, CompletionRequest* r) {
  if (!body.is_object()) {
    return bad_type("", fmt::format("request body must be a JSON object, got {}", type_name(body)));
  }
  if (auto e = reject_unsupported(body)) return e;
  auto model = body.find("model");
  if (model == body.end() || model->is_null()) return bad("model", "'model' is required");
  if (!model->is_string()) {
    return bad_type("model", fmt::format("'model' must be a string, got {}", type_name(*model)));
  }
  r->model = model->get<std::string>();
  if (endpoint == Endpoint::Chat) {
    if (auto e = read_messages(body, &r->messages)) return e;
  } else {
    if (auto e = read_prompt(body, &r->prompts)) return e;
  }
  if (auto e = read_bool(body, "stream", &r->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return bad_type("stream_options", "'stream_options' must be an object");
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
  r->seed_given = n.has_value();
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
    if (r->echo && r->logprobs) {
      return ApiError{ErrorKind::Unsupported,
                      "'echo' together with 'logprobs' (log-probabilities of the prompt) is not "
                      "supported",
                      "echo"};
    }
  }
  if (auto e = read_logit_bias(body, &s)) return e;
  n.reset();
  if (auto e = read_int(body, "n", 1, 16, &n)) return e;
  if (n) r->n = static_cast<int32_t>(*n);
  if (endpoint == Endpoint::Chat) {
    if (auto e = read_tools(body, r)) return e;
    if (auto e = read_response_format(body, r)) return e;
    if (auto it = body.find("parallel_tool_calls"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean())
        return bad_type("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    }
  }
  s.top_logprobs = r->top_logprobs;
  s.logprobs = r->logprobs;
  if (auto it = body.find("user"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return bad_type("user", "'user' must be a string");
    r->user = it->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

json template_messages(const std::vector<Message>& messages) {
  json out = json::array();
  for (const Message& m : messages) {
    json j = {{"role", m.role}};
    j["content"] = m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content);
    if (!m.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCallIn& c : m.tool_calls) {
        json args = text::parse_json_bounded(c.arguments);
        if (args.is_discarded()) args = c.arguments;
        calls.push_back({{"id", c.id},
                         {"type", "function"},
                         {"function", {{"name", c.name}, {"arguments", std::move(args)}}}});
      }
      j["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
    out.push_back(std::move(j));
  }
  return out;
}

std::variant<json, ApiError> parse_json_body(std::string_view body) {
  // Before anything parses or walks it: copies, dumps and the chat template recurse per level.
  if (text::json_depth(body) > text::kMaxJsonDepth) {
    return ApiError{ErrorKind::InvalidRequest,
                    fmt::format("the request body nests arrays and objects deeper than {} levels "
                                "(limit {})",
                                text::kMaxJsonDepth, text::kMaxJsonDepth),
                    std::nullopt};
  }
  json j = text::parse_json_bounded(body);  // linear in the members of an object, too
  if (j.is_discarded()) {
    return ApiError{ErrorKind::InvalidJson, "request body is not valid JSON", std::nullopt};
  }
  return j;
}

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   Endpoint endpoint) {
  auto parsed = parse_json_body(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  const json& j = std::get<json>(parsed);
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
