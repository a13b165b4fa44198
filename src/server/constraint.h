// The output constraint a chat request asks for, as the engine's opaque TokenConstraint:
// response_format json_object / json_schema, and tool_choice required / a named function (one
// well-formed call in the model's tool format). Grammars compile against the model's
// vocabulary through worker::constraint_from_spec (the worker rebuilds the same constraint from
// its spec) and TextCodec::grammar, which caches them (and their masks) by spec.
#pragma once

#include <memory>
#include <variant>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "text/text_codec.h"
#include "worker/constraint.h"

namespace ember::server {

// Null when the request constrains nothing. Errors (400): a schema the grammar cannot enforce,
// naming the feature and where it is.
std::variant<std::shared_ptr<worker::TokenConstraint>, ApiError> make_constraint(
    const CompletionRequest& r, const text::TextCodec& text);

// Whether the request forces a tool call (the answer is then parsed as calls).
bool forces_tool_call(const CompletionRequest& r);

}  // namespace ember::server
