// Parsing and validating OpenAI request bodies (/v1/chat/completions, /v1/completions) into
// native types, as early as possible on the HTTP thread. Unknown fields are ignored; known
// parameters ember does not support (suffix, best_of > 1, ...) are a 400 naming the parameter.
// Tools: `tools`/`tool_choice` and the legacy `functions`/`function_call` both end up as
// `tools` (the OpenAI array, normalized) and a ToolChoice; replayed histories keep their
// assistant tool_calls and tool results.
// Pure: no engine, no tokenizer — so every validation rule is unit-testable.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "worker/types.h"

namespace ember::server {

enum class Endpoint { Chat, Completion };

struct ToolCallIn {  // an assistant message's tool call, replayed in the history
  std::string id, name, arguments;
};

struct Message {
  std::string role;
  std::string content;
  std::vector<ToolCallIn> tool_calls;  // assistant
  std::string tool_call_id;            // tool
  std::string name;                    // tool (function name), optional
};

enum class ToolChoice { Auto, None, Required, Named };
enum class ResponseFormat { Text, JsonObject, JsonSchema };

struct Prompt {  // one /v1/completions prompt: text, or token ids
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;
  std::vector<Message> messages;  // Chat
  std::vector<Prompt> prompts;    // Completion: one or several
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int32_t> max_tokens;  // max_tokens / max_completion_tokens
  worker::SamplingParams sampling;
  bool seed_given = false;  // false: the handler draws a fresh seed for this request
  std::vector<std::string> stop;
  bool logprobs = false;  // chat: logprobs=true; completion: logprobs=N (N >= 0)
  int32_t top_logprobs = 0;
  bool echo = false;  // completion: the prompt's text starts each choice's text
  std::string user;
  int32_t n = 1;  // choices per prompt
  // Tools (key order kept, as sent), as the OpenAI `tools` array ([{"type": "function", "function":
  // {...}}]); null: none.
  nlohmann::ordered_json tools;
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;   // Named
  bool legacy_functions = false;  // answer with `function_call` (the request used `functions`)
  ResponseFormat response_format = ResponseFormat::Text;
  nlohmann::ordered_json json_schema;  // JsonSchema: the schema
};

// Messages as chat templates see them (Hugging Face's shape): tool calls with their arguments
// as an object when they are JSON (templates print them with tojson), content null for an
// assistant turn that only called tools, tool results with their call id.
nlohmann::ordered_json template_messages(const std::vector<Message>& messages);

// A request body as JSON, read within text/json_limits.h's bounds: the nesting checked before
// anything parses it, an object's members appended in constant time each. Errors (400):
// nested deeper than kMaxJsonDepth, not JSON (invalid_json).
std::variant<nlohmann::ordered_json, ApiError> parse_json_body(std::string_view body);

// Errors (400): malformed JSON, wrong types, empty messages, out-of-range values,
// unsupported parameters. `model` is checked later against the served names.
std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   Endpoint endpoint);

}  // namespace ember::server
