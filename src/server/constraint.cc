#include "server/constraint.h"

#include <fmt/format.h>

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;

}  // namespace

bool forces_tool_call(const CompletionRequest& r) {
  return !r.tools.is_null() &&
         (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named);
}

std::variant<std::shared_ptr<worker::TokenConstraint>, ApiError> make_constraint(
    const CompletionRequest& r, const text::TextCodec& text) {
  std::string spec;
  const char* param = "response_format";
  if (forces_tool_call(r)) {
    std::vector<text::ToolSpec> specs;
    for (const json& t : r.tools) {
      const json& f = t["function"];
      std::string name = f["name"].get<std::string>();
      if (r.tool_choice == ToolChoice::Named && name != r.tool_choice_name) continue;
      specs.push_back({name, f.value("parameters", json())});
    }
    spec = worker::tool_call_spec(text.tool_format(), specs);
    param = r.legacy_functions ? "functions" : "tools";
  } else if (r.response_format == ResponseFormat::JsonObject) {
    spec = worker::json_object_spec();
  } else if (r.response_format == ResponseFormat::JsonSchema) {
    spec = worker::json_schema_spec(r.json_schema.dump());
    param = "response_format.json_schema.schema";
  } else {
    return std::shared_ptr<worker::TokenConstraint>();
  }
  auto c = worker::constraint_from_spec(spec, text);
  if (!c.ok()) {
    return ApiError{ErrorKind::Unsupported, fmt::format("{}: {}", param, c.message()), param};
  }
  return std::move(*c);
}

}  // namespace ember::server
