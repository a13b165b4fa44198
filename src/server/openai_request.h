// Parsing and validating OpenAI request bodies (/v1/chat/completions, /v1/completions) into
// native types, as early as possible on the HTTP thread. Unknown fields are ignored; known
// parameters ember does not support yet (n > 1, tools, ...) are a 400 naming the parameter.
// Pure: no engine, no tokenizer — so every validation rule is unit-testable.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "server/api_error.h"
#include "worker/types.h"

namespace ember::server {

enum class Endpoint { Chat, Completion };

struct Message {
  std::string role;
  std::string content;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;
  std::vector<Message> messages;  // Chat
  std::string prompt;             // Completion
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  std::optional<int32_t> max_tokens;  // max_tokens / max_completion_tokens
  worker::SamplingParams sampling;
  std::vector<std::string> stop;
  bool logprobs = false;  // chat: logprobs=true; completion: logprobs=N (N >= 0)
  int32_t top_logprobs = 0;
  bool echo = false;  // completion: accepted only as false
  std::string user;
};

// Errors (400): malformed JSON, wrong types, empty messages, out-of-range values,
// unsupported parameters. `model` is checked later against the served names.
std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body,
                                                                   Endpoint endpoint);

}  // namespace ember::server
