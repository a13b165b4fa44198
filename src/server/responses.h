// OpenAI response bodies: streaming chunks (chat.completion.chunk / text_completion) and whole
// responses (chat.completion / text_completion). Pure JSON builders, unit-tested for shape.
// Stream order: [role chunk (chat)] -> content chunks -> final chunk with finish_reason
// -> [usage chunk with choices: [] when include_usage] -> [DONE].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "worker/types.h"

namespace ember::server {

struct ResponseContext {
  Endpoint endpoint = Endpoint::Chat;
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
  bool include_usage = false;
};

// One generated token's log-probability, in text form.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

nlohmann::json chunk_role(const ResponseContext& c);  // chat only
nlohmann::json chunk_content(const ResponseContext& c, const std::string& text,
                             const std::vector<TokenLogprob>* logprobs);
nlohmann::json chunk_final(const ResponseContext& c, const std::string& finish_reason);
nlohmann::json chunk_usage(const ResponseContext& c, const worker::Usage& u);
nlohmann::json error_event(const ApiError& e);  // {"error": {...}} as an SSE event

nlohmann::json full_response(const ResponseContext& c, const std::string& text,
                             const std::string& finish_reason, const worker::Usage& u,
                             const std::vector<TokenLogprob>* logprobs);

nlohmann::json usage_json(const worker::Usage& u);

}  // namespace ember::server
