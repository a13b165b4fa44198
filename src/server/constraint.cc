#include "server/constraint.h"

#include <fmt/format.h>

#include "text/json_limits.h"

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;

}  // namespace

bool forces_tool_call(const CompletionRequest& r) {
  return !r.tools.is_null() &&
         (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named);
}

ApiError constraint_error(const ConstraintSpec& c, const std::string& message) {
  return ApiError{ErrorKind::Unsupported, fmt::format("{}: {}", c.param, message), c.param};
}

std::variant<ConstraintSpec, ApiError> constraint_spec(const CompletionRequest& r,
                                                       const text::TextCodec& text) {
  ConstraintSpec c;
  text::SchemaBudget budget;  // one grammar: every schema of the request counts together
  if (forces_tool_call(r)) {
    c.param = r.legacy_functions ? "functions" : "tools";
    std::vector<text::ToolSpec> specs;
    for (const json& t : r.tools) {
      const json& f = t["function"];
      std::string name = f["name"].get<std::string>();
      if (r.tool_choice == ToolChoice::Named && name != r.tool_choice_name) continue;
      json params = f.value("parameters", json());
      if (auto l = text::check_schema_limits(params, budget); !l.ok()) {
        return constraint_error(c, fmt::format("tool '{}' parameters: {}", name, l.message()));
      }
      specs.push_back({std::move(name), std::move(params)});
    }
    c.spec = worker::tool_call_spec(text.tool_format(), specs);
  } else if (r.response_format == ResponseFormat::JsonObject) {
    c.spec = worker::json_object_spec();
  } else if (r.response_format == ResponseFormat::JsonSchema) {
    c.param = "response_format.json_schema.schema";
    if (auto l = text::check_schema_limits(r.json_schema, budget); !l.ok()) {
      return constraint_error(c, l.message());
    }
    c.spec = worker::json_schema_spec(r.json_schema.dump());
  }
  return c;
}

std::variant<std::shared_ptr<worker::TokenConstraint>, ApiError> build_constraint(
    const ConstraintSpec& c, const text::TextCodec& text) {
  if (c.spec.empty()) return std::shared_ptr<worker::TokenConstraint>();
  auto built = worker::constraint_from_spec(c.spec, text);
  if (!built.ok()) return constraint_error(c, built.message());
  return std::move(*built);
}

}  // namespace ember::server
