#include "server/constraint.h"

#include <fmt/format.h>

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;

class GrammarConstraint final : public engine::TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const text::CompiledGrammar> g) : m_(std::move(g)) {}
  bool mask(std::span<float> logits) override { return m_.apply(logits); }
  void accept(int32_t token) override {
    bool ok = m_.accept(token);
    EMBER_ASSERT(ok);  // the engine samples only what mask() allowed
  }
  bool complete() const override { return m_.done(); }
  std::unique_ptr<engine::TokenConstraint> clone() const override {
    return std::make_unique<GrammarConstraint>(*this);
  }

 private:
  text::GrammarMatcher m_;
};

}  // namespace

bool forces_tool_call(const CompletionRequest& r) {
  return !r.tools.is_null() &&
         (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named);
}

std::variant<std::shared_ptr<engine::TokenConstraint>, ApiError> make_constraint(
    const CompletionRequest& r, const text::TextCodec& text) {
  std::string key;
  std::function<Result<text::Grammar>()> build;
  const char* param = "response_format";
  if (forces_tool_call(r)) {
    std::vector<text::ToolSpec> specs;
    for (const json& t : r.tools) {
      const json& f = t["function"];
      std::string name = f["name"].get<std::string>();
      if (r.tool_choice == ToolChoice::Named && name != r.tool_choice_name) continue;
      specs.push_back({name, f.value("parameters", json())});
    }
    const text::ToolFormat format = text.tool_format();
    json spec_json = json::array();
    for (const auto& s : specs) spec_json.push_back({s.name, s.parameters});
    key = fmt::format("tools/{}/{}", text::tool_format_name(format), spec_json.dump());
    build = [specs, format] { return text::tool_call_grammar(format, specs); };
    param = r.legacy_functions ? "functions" : "tools";
  } else if (r.response_format == ResponseFormat::JsonObject) {
    key = "json_object";
    build = [] { return Result<text::Grammar>(text::Grammar::any_object()); };
  } else if (r.response_format == ResponseFormat::JsonSchema) {
    key = "schema/" + r.json_schema.dump();
    json schema = r.json_schema;
    build = [schema] { return text::Grammar::from_schema(schema); };
    param = "response_format.json_schema.schema";
  } else {
    return std::shared_ptr<engine::TokenConstraint>();
  }
  auto g = text.grammar(key, build);
  if (!g.ok()) {
    return ApiError{ErrorKind::Unsupported, fmt::format("{}: {}", param, g.message()), param};
  }
  return std::shared_ptr<engine::TokenConstraint>(std::make_shared<GrammarConstraint>(*g));
}

}  // namespace ember::server
