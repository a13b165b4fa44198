// The OpenAI wire formats as ResponseWriters (server/response_writer.h): chat completions as
// one JSON body or as SSE chunks, text completions likewise. The JSON shapes are built by
// server/responses.h; these classes decide what goes out when.
#pragma once

#include <memory>

#include "server/response_writer.h"

namespace ember::server {

// `logprobs`: the request asked for log-probabilities (the JSON answer then carries them).
std::unique_ptr<ResponseWriter> make_openai_writer(ResponseContext ctx, bool stream, bool logprobs);

// The OpenAI finish_reason of one choice: "stop", "length", "cancelled", "error", or, for a
// choice that called tools, "tool_calls" ("function_call" for the legacy `functions`).
std::string openai_finish_reason(const ResponseContext& ctx, const ChoiceEnd& end);

}  // namespace ember::server
