// OpenAI response bodies: streaming chunks (chat.completion.chunk / text_completion) and whole
// responses (chat.completion / text_completion). Pure JSON builders, unit-tested for shape.
// Stream order: [role chunk per choice (chat)] -> content / tool-call chunks (each naming its
// choice index) -> a final chunk with finish_reason per choice -> [usage chunk with
// choices: [] when include_usage] -> [DONE]. A tool call streams as OpenAI streams it: a
// delta.tool_calls entry with index, id, type and name (arguments ""), then argument fragments.
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
  bool legacy_functions = false;  // tool calls answered as `function_call` (legacy functions)
};

struct ToolCallOut {
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;  // JSON text
};

// One generated token's log-probability, in text form.
struct TokenLogprob {
  std::string token;
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;
};

// One choice of a whole (non-streaming) answer.
struct ChoiceOut {
  uint32_t index = 0;
  std::string text;
  std::vector<ToolCallOut> tool_calls;
  std::string finish_reason;
  const std::vector<TokenLogprob>* logprobs = nullptr;
};

nlohmann::json chunk_role(const ResponseContext& c, uint32_t index);  // chat only
nlohmann::json chunk_content(const ResponseContext& c, uint32_t index, const std::string& text,
                             const std::vector<TokenLogprob>* logprobs);
// A tool call's delta: `header` (id, type, name, arguments "") or an arguments fragment.
nlohmann::json chunk_tool_call(const ResponseContext& c, uint32_t index, uint32_t call_index,
                               const ToolCallOut& call, bool header, const std::string& fragment);
nlohmann::json chunk_final(const ResponseContext& c, uint32_t index,
                           const std::string& finish_reason);
nlohmann::json chunk_usage(const ResponseContext& c, const worker::Usage& u);
nlohmann::json error_event(const ApiError& e);  // {"error": {...}} as an SSE event

nlohmann::json full_response(const ResponseContext& c, const std::vector<ChoiceOut>& choices,
                             const worker::Usage& u);

nlohmann::json usage_json(const worker::Usage& u);

}  // namespace ember::server
