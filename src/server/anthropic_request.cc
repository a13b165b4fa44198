#include "server/anthropic_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;

ApiError bad(std::string param, std::string message) {
  return ApiError{ErrorKind::InvalidRequest, std::move(message), std::move(param)};
}

ApiError bad_type(std::string param, const char* expected, const json& got) {
  std::string m = fmt::format("'{}' must be {}, got {}", param, expected, got.type_name());
  return ApiError{ErrorKind::InvalidType, std::move(m), std::move(param)};
}

const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::optional<ApiError> read_number(const json& body, const char* key, double lo, double hi,
                                    float* out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) return bad_type(key, "a number", *v);
  double d = v->get<double>();
  if (!(d >= lo && d <= hi)) {
    return bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, d));
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

std::optional<ApiError> read_count(const json& body, const char* key, int64_t lo,
                                   std::optional<int32_t>* out) {
  const json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) return bad_type(key, "an integer", *v);
  const int64_t n = v->is_number_unsigned()
                        ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX))
                        : v->get<int64_t>();
  if (n < lo || n > INT32_MAX) {
    return bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, INT32_MAX, n));
  }
  *out = static_cast<int32_t>(n);
  return std::nullopt;
}

// A text block's text, or an error naming the block.
std::optional<ApiError> block_text(const json& b, const std::string& param, std::string* out) {
  const json* t = field(b, "text");
  if (!t || !t->is_string())
    return bad(param + ".text", fmt::format("'{}.text' must be a string", param));
  *out += t->get<std::string>();
  return std::nullopt;
}

std::string block_type(const json& b) {
  const json* t = b.is_object() ? field(b, "type") : nullptr;
  return t && t->is_string() ? t->get<std::string>() : std::string();
}

ApiError unsupported_block(const std::string& param, const std::string& type, const char* allowed) {
  return ApiError{ErrorKind::Unsupported,
                  fmt::format("'{}' is a '{}' block; only {} blocks are supported here", param,
                              type.empty() ? "untyped" : type, allowed),
                  param};
}

// Text content: a string, or an array of text blocks (joined).
std::optional<ApiError> read_text(const json& v, const std::string& param, std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) return bad_type(param, "a string or an array of text blocks", v);
  for (size_t k = 0; k < v.size(); ++k) {
    std::string p = fmt::format("{}[{}]", param, k);
    if (block_type(v[k]) != "text") return unsupported_block(p, block_type(v[k]), "text");
    if (auto e = block_text(v[k], p, out)) return e;
  }
  return std::nullopt;
}

// One message of the history, as the messages the chat template takes: an assistant turn
// with its tool_use blocks as tool calls; a user turn's tool_result blocks as tool messages
// (first, as Anthropic requires them), then its text.
std::optional<ApiError> read_message(const json& m, size_t i,
                                     std::map<std::string, std::string>* tool_names,
                                     std::vector<Message>* out) {
  std::string param = fmt::format("messages[{}]", i);
  if (!m.is_object()) return bad_type(param, "an object", m);
  const json* role = field(m, "role");
  if (!role || !role->is_string() || (*role != "user" && *role != "assistant")) {
    return bad(param + ".role", fmt::format("'{}.role' must be 'user' or 'assistant'", param));
  }
  Message msg;
  msg.role = role->get<std::string>();
  const json* content = field(m, "content");
  param += ".content";
  if (!content) return bad(param, fmt::format("'{}' is required", param));
  if (content->is_string()) {
    msg.content = content->get<std::string>();
    out->push_back(std::move(msg));
    return std::nullopt;
  }
  if (!content->is_array()) return bad_type(param, "a string or an array of blocks", *content);
  const bool user = msg.role == "user";
  for (size_t k = 0; k < content->size(); ++k) {
    const json& b = (*content)[k];
    std::string p = fmt::format("{}[{}]", param, k);
    std::string type = block_type(b);
    if (type == "text") {
      if (auto e = block_text(b, p, &msg.content)) return e;
    } else if (type == "tool_use" && !user) {
      const json* id = field(b, "id");
      const json* name = field(b, "name");
      if (!id || !id->is_string() || !name || !name->is_string()) {
        return bad(p, fmt::format("'{}' (tool_use) needs a string 'id' and 'name'", p));
      }
      const json* input = field(b, "input");
      if (input && !input->is_object()) return bad_type(p + ".input", "an object", *input);
      (*tool_names)[id->get<std::string>()] = name->get<std::string>();
      msg.tool_calls.push_back({id->get<std::string>(), name->get<std::string>(),
                                input ? input->dump() : std::string("{}")});
    } else if (type == "tool_result" && user) {
      const json* id = field(b, "tool_use_id");
      if (!id || !id->is_string()) {
        return bad(p, fmt::format("'{}' (tool_result) needs a string 'tool_use_id'", p));
      }
      Message result;
      result.role = "tool";
      result.tool_call_id = id->get<std::string>();
      if (auto it = tool_names->find(result.tool_call_id); it != tool_names->end()) {
        result.name = it->second;
      }
      if (const json* c = field(b, "content")) {
        if (auto e = read_text(*c, p + ".content", &result.content)) return e;
      }
      out->push_back(std::move(result));
    } else {
      return unsupported_block(p, type, user ? "text and tool_result" : "text and tool_use");
    }
  }
  // A user turn of tool results only is complete; any other turn is kept (even empty).
  if (!msg.content.empty() || !msg.tool_calls.empty() || out->empty() ||
      out->back().role != "tool") {
    out->push_back(std::move(msg));
  }
  return std::nullopt;
}

// tools: [{name, description?, input_schema}] as the OpenAI tools array; tool_choice.
std::optional<ApiError> read_tools(const json& body, CompletionRequest* r) {
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) return bad_type("tools", "an array", *tools);
    json normalized = json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      std::string param = fmt::format("tools[{}]", i);
      if (!t.is_object()) return bad_type(param, "an object", t);
      if (const json* type = field(t, "type"); type && *type != "custom") {
        return ApiError{ErrorKind::Unsupported,
                        fmt::format("'{}': server tools ({}) are not supported; give "
                                    "'name', 'description' and 'input_schema'",
                                    param, type->dump()),
                        param};
      }
      const json* name = field(t, "name");
      if (!name || !name->is_string() || name->get<std::string>().empty()) {
        return bad(param + ".name", fmt::format("'{}.name' must be a non-empty string", param));
      }
      const json* schema = field(t, "input_schema");
      if (!schema || !schema->is_object()) {
        return bad(param + ".input_schema",
                   fmt::format("'{}.input_schema' must be a JSON schema object", param));
      }
      json fn = {{"name", *name}};
      if (const json* d = field(t, "description"); d && d->is_string()) fn["description"] = *d;
      fn["parameters"] = *schema;
      normalized.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    if (!normalized.empty()) r->tools = std::move(normalized);
  }
  const json* choice = field(body, "tool_choice");
  if (!choice) return std::nullopt;
  if (!choice->is_object()) return bad_type("tool_choice", "an object", *choice);
  std::string type = block_type(*choice);
  if (type == "auto") {
    r->tool_choice = ToolChoice::Auto;
  } else if (type == "none") {
    r->tool_choice = ToolChoice::None;
  } else if (type == "any" || type == "tool") {
    if (r->tools.is_null()) {
      return bad("tool_choice", fmt::format("'tool_choice' {} asks for a tool call but no "
                                            "tools are given",
                                            type));
    }
    r->tool_choice = type == "any" ? ToolChoice::Required : ToolChoice::Named;
  } else {
    return bad("tool_choice.type", "'tool_choice.type' must be auto, any, tool or none");
  }
  if (r->tool_choice == ToolChoice::Named) {
    const json* name = field(*choice, "name");
    if (!name || !name->is_string()) {
      return bad("tool_choice.name", "'tool_choice' of type tool needs a 'name'");
    }
    r->tool_choice_name = name->get<std::string>();
    bool found = false;
    for (const json& t : r->tools) found = found || t["function"]["name"] == *name;
    if (!found) {
      return bad("tool_choice.name",
                 fmt::format("'tool_choice.name' is '{}', which is not among the tools",
                             r->tool_choice_name));
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_into(const json& body, MessagesRoute route, CompletionRequest* r) {
  if (!body.is_object()) return bad_type("body", "a JSON object", body);
  const json* model = field(body, "model");
  if (!model) return bad("model", "'model' is required");
  if (!model->is_string()) return bad_type("model", "a string", *model);
  r->model = model->get<std::string>();
  if (route == MessagesRoute::Create) {
    if (!field(body, "max_tokens")) return bad("max_tokens", "'max_tokens' is required");
    if (auto e = read_count(body, "max_tokens", 1, &r->max_tokens)) return e;
  }
  if (const json* system = field(body, "system")) {
    Message m{"system", {}, {}, {}, {}};
    if (auto e = read_text(*system, "system", &m.content)) return e;
    r->messages.push_back(std::move(m));
  }
  const json* messages = field(body, "messages");
  if (!messages) return bad("messages", "'messages' is required");
  if (!messages->is_array()) return bad_type("messages", "an array", *messages);
  if (messages->empty()) return bad("messages", "'messages' must not be empty");
  std::map<std::string, std::string> tool_names;  // tool_use id -> tool name
  for (size_t i = 0; i < messages->size(); ++i) {
    if (auto e = read_message((*messages)[i], i, &tool_names, &r->messages)) return e;
  }
  if (const json* stream = field(body, "stream")) {
    if (!stream->is_boolean()) return bad_type("stream", "a boolean", *stream);
    r->stream = stream->get<bool>();
  }
  if (const json* stops = field(body, "stop_sequences")) {
    if (!stops->is_array()) return bad_type("stop_sequences", "an array of strings", *stops);
    if (stops->size() > kMaxStopSequences) {
      return bad("stop_sequences",
                 fmt::format("'stop_sequences' may hold at most {} strings", kMaxStopSequences));
    }
    for (const json& s : *stops) {
      if (!s.is_string()) return bad_type("stop_sequences", "an array of strings", *stops);
      if (!s.get<std::string>().empty()) r->stop.push_back(s.get<std::string>());
    }
  }
  worker::SamplingParams& s = r->sampling;
  if (auto e = read_number(body, "temperature", 0, 1, &s.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0, 1, &s.top_p)) return e;
  std::optional<int32_t> top_k;
  if (auto e = read_count(body, "top_k", 0, &top_k)) return e;
  if (top_k) s.top_k = *top_k;
  return read_tools(body, r);
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_messages_request(std::string_view body,
                                                                 MessagesRoute route) {
  auto parsed = parse_json_body(body);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  CompletionRequest r;
  r.endpoint = Endpoint::Chat;
  try {
    if (auto e = parse_into(std::get<json>(parsed), route, &r)) return *e;
  } catch (const json::exception& e) {  // a type we did not check: still the client's fault
    return ApiError{ErrorKind::InvalidRequest, std::string("invalid request: ") + e.what(), {}};
  }
  return r;
}

}  // namespace ember::server
