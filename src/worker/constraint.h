// Output constraints as a source spec that crosses the worker protocol. A
// TokenConstraint is an in-process object (a grammar matcher over one vocabulary); what the
// front sends the worker is the spec it was built from, and both sides build the constraint
// with the same function against the same GGUF's vocabulary, so the worker's matcher accepts
// exactly what the front's would.
// See docs/architecture.md, "Worker protocol".
//
// A spec is one of:
//   "json_object"                  any JSON object
//   "schema/<JSON schema>"         a value the schema accepts
//   "tools/<format>/<[[name, parameters], ...]>"   one call in the tool format (hermes, ...)
// It is also the key of the codec's grammar cache, so a spec compiles once per process. The
// front builds no grammar for a worker (server/constraint.h): the worker compiles the spec, once,
// and refuses a submit whose spec it cannot build (SubmitError::Kind::BadConstraint).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "text/text_codec.h"
#include "text/tool_calls.h"
#include "worker/types.h"

namespace ember::worker {

std::string json_object_spec();
std::string json_schema_spec(const std::string& schema_json);
std::string tool_call_spec(text::ToolFormat format, const std::vector<text::ToolSpec>& tools);

// Builds the constraint a spec describes against `text`'s vocabulary; the constraint reports
// the spec back through TokenConstraint::spec(). An error names what in the spec is wrong or
// what the grammar cannot enforce.
Result<std::shared_ptr<TokenConstraint>> constraint_from_spec(const std::string& spec,
                                                              const text::TextCodec& text);

// A constraint that carries only its spec, for an engine client that has the engine side build
// it (EngineClient::builds_constraints()); masking with it is a bug (an assertion).
std::shared_ptr<TokenConstraint> unbuilt_constraint(std::string spec);

}  // namespace ember::worker
