// The output constraint a chat request asks for, as the engine's opaque TokenConstraint:
// response_format json_object / json_schema, and tool_choice required / a named function (one
// well-formed call in the model's tool format).
//
// A request's grammar is compiled once, by whichever process runs the engine: the front only
// checks the schemas against SchemaLimits (text/json_limits.h: a linear walk, no compile) and
// builds the spec (worker/constraint.h). With an engine worker the spec travels to it and the
// worker compiles (a schema it cannot enforce comes back as a refusal, answered 400 before any
// token); with the engine in this process build_constraint() compiles it here, off the HTTP
// I/O threads (generation.cc). Either way TextCodec::grammar caches the compiled grammar (and
// its masks) by spec.
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "server/api_error.h"
#include "server/openai_request.h"
#include "text/text_codec.h"
#include "worker/constraint.h"

namespace ember::server {

struct ConstraintSpec {
  std::string spec;                       // empty: the request constrains nothing
  std::string param = "response_format";  // what a refusal names
};

// The request's constraint as a spec. Errors (400): a schema past SchemaLimits, naming the
// limit and where ("response_format.json_schema.schema: #/properties/a: ... (limit 32)").
std::variant<ConstraintSpec, ApiError> constraint_spec(const CompletionRequest& r,
                                                       const text::TextCodec& text);

// Compiles a spec against `text`'s vocabulary. Errors (400): a schema the grammar cannot
// enforce, naming the feature and where it is.
std::variant<std::shared_ptr<worker::TokenConstraint>, ApiError> build_constraint(
    const ConstraintSpec& c, const text::TextCodec& text);

// The 400 for a spec the engine side could not build (`message`: the compiler's words).
ApiError constraint_error(const ConstraintSpec& c, const std::string& message);

// Whether the request forces a tool call (the answer is then parsed as calls).
bool forces_tool_call(const CompletionRequest& r);

}  // namespace ember::server
