// Server-sent events as OpenAI streams them: each event is `data: <json>\n\n`, the stream
// ends with `data: [DONE]\n\n`. JSON is dumped with invalid UTF-8 replaced (U+FFFD) as a last
// line of defence: the detokenizer already emits only whole characters.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace ember::server {

std::string sse_event(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";
// A comment line, which SSE parsers skip: written to a half-closed stream as a probe (a peer
// that closed for good answers it with a reset).
inline constexpr const char* kSseProbe = ": probe\n\n";

// dump() that never throws on invalid UTF-8.
std::string dump_json(const nlohmann::json& j);

}  // namespace ember::server
