// The Anthropic Messages wire format as ResponseWriters (server/response_writer.h): one
// `message` JSON body, or the typed SSE stream (`event:` lines): message_start, ping, then per
// content block content_block_start / content_block_delta (text_delta, input_json_delta) /
// content_block_stop, then message_delta (stop_reason, stop_sequence, usage.output_tokens) and
// message_stop. Tool calls are `tool_use` blocks with "toolu_" ids and their input as an
// object. Errors, before or during the answer, in Anthropic's shape:
// {"type":"error","error":{"type":"invalid_request_error","message":...}}.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "server/response_writer.h"

namespace ember::server {

struct MessagesContext {
  std::string id;  // "msg_..."
  std::string model;
  int32_t input_tokens = 0;  // the prompt's tokens (message_start carries them)
};

std::unique_ptr<ResponseWriter> make_anthropic_writer(MessagesContext ctx, bool stream);

// "end_turn", "max_tokens", "stop_sequence" or "tool_use".
std::string anthropic_stop_reason(const ChoiceEnd& end);

// Anthropic's name for an error (authentication_error, not_found_error, ...) and the whole
// answer: the status of the ember error kind, Anthropic's body.
std::string anthropic_error_type(const ApiError& e);
std::string anthropic_error_body(const ApiError& e);
Reply anthropic_error_reply(const ApiError& e);

}  // namespace ember::server
