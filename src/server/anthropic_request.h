// Parsing and validating Anthropic Messages request bodies (POST /v1/messages and
// /v1/messages/count_tokens) into the CompletionRequest every generating route is prepared
// from (server/prepare.h): `system` (a string or text blocks) becomes the first message, text
// blocks are joined, assistant `tool_use` blocks become replayed tool calls and user
// `tool_result` blocks tool messages; `tools` with `input_schema` become the OpenAI tools array
// and `tool_choice` auto / any / tool / none the ToolChoice the tool machinery already knows.
// Unknown fields are ignored; content blocks ember cannot take (image, document, ...) are a 400
// naming the block. Pure: no engine, no tokenizer.
//
// Bounds: the body is read by parse_json_body (nesting at most text::kMaxJsonDepth, the size by
// the server's body limit); at most kMaxStopSequences stop sequences (each is matched against
// every piece of generated text).
#pragma once

#include <string_view>
#include <variant>

#include "server/openai_request.h"

namespace ember::server {

inline constexpr size_t kMaxStopSequences = 16;

enum class MessagesRoute { Create, CountTokens };

// Errors (400, param named): malformed JSON, wrong types, a missing `max_tokens` (Create only),
// empty `messages`, roles other than user and assistant, unsupported content blocks.
std::variant<CompletionRequest, ApiError> parse_messages_request(std::string_view body,
                                                                 MessagesRoute route);

}  // namespace ember::server
