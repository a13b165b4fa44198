#include "worker/constraint.h"

#include <nlohmann/json.hpp>

#include "text/grammar.h"
#include "text/grammar_mask.h"
#include "text/json_limits.h"

namespace ember::worker {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kJsonObject = "json_object";
constexpr std::string_view kSchema = "schema/";
constexpr std::string_view kTools = "tools/";

class GrammarConstraint final : public TokenConstraint {
 public:
  GrammarConstraint(std::shared_ptr<const text::CompiledGrammar> g, std::string spec)
      : m_(std::move(g)), spec_(std::move(spec)) {}
  bool mask(std::span<float> logits) override { return m_.apply(logits); }
  void accept(int32_t token) override {
    bool ok = m_.accept(token);
    EMBER_ASSERT(ok);  // the engine samples only what mask() allowed
  }
  bool complete() const override { return m_.done(); }
  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<GrammarConstraint>(*this);
  }
  std::string spec() const override { return spec_; }

 private:
  text::GrammarMatcher m_;
  std::string spec_;
};

Result<json> parse_json(std::string_view text, const char* what) {
  json j = text::parse_json_bounded(text);
  if (j.is_discarded()) return fail("constraint spec: {} is not valid JSON", what);
  return j;
}

Result<text::ToolFormat> tool_format_named(std::string_view name) {
  for (auto f : {text::ToolFormat::Hermes, text::ToolFormat::Llama3, text::ToolFormat::Mistral}) {
    if (text::tool_format_name(f) == name) return f;
  }
  return fail("constraint spec: unknown tool format '{}'", name);
}

Result<std::function<Result<text::Grammar>()>> builder(const std::string& spec) {
  std::string_view s = spec;
  if (s == kJsonObject) {
    return std::function<Result<text::Grammar>()>(
        [] { return Result<text::Grammar>(text::Grammar::any_object()); });
  }
  if (s.starts_with(kSchema)) {
    EMBER_TRY(json schema, parse_json(s.substr(kSchema.size()), "the schema"));
    return std::function<Result<text::Grammar>()>(
        [schema] { return text::Grammar::from_schema(schema); });
  }
  if (s.starts_with(kTools)) {
    s.remove_prefix(kTools.size());
    size_t slash = s.find('/');
    if (slash == std::string_view::npos) return fail("constraint spec: tools without a format");
    EMBER_TRY(text::ToolFormat format, tool_format_named(s.substr(0, slash)));
    EMBER_TRY(json list, parse_json(s.substr(slash + 1), "the tool list"));
    std::vector<text::ToolSpec> tools;
    if (!list.is_array()) return fail("constraint spec: the tool list is not an array");
    for (const json& t : list) {
      if (!t.is_array() || t.size() != 2 || !t[0].is_string()) {
        return fail("constraint spec: a tool is not [name, parameters]");
      }
      tools.push_back({t[0].get<std::string>(), t[1]});
    }
    return std::function<Result<text::Grammar>()>(
        [tools, format] { return text::tool_call_grammar(format, tools); });
  }
  return fail("constraint spec: unknown kind '{}'", s.substr(0, s.find('/')));
}

// A constraint that only carries its spec, for an engine that builds it from the spec itself.
class UnbuiltConstraint final : public TokenConstraint {
 public:
  explicit UnbuiltConstraint(std::string spec) : spec_(std::move(spec)) {}
  bool mask(std::span<float>) override { return unusable(); }
  void accept(int32_t) override { unusable(); }
  bool complete() const override { return unusable(); }
  std::unique_ptr<TokenConstraint> clone() const override {
    return std::make_unique<UnbuiltConstraint>(*this);
  }
  std::string spec() const override { return spec_; }

 private:
  static bool unusable() {
    EMBER_ASSERT(!"an unbuilt constraint reached an engine in this process");
    return false;
  }
  std::string spec_;
};

}  // namespace

std::string json_object_spec() {
  return std::string(kJsonObject);
}

std::string json_schema_spec(const std::string& schema_json) {
  return std::string(kSchema) + schema_json;
}

std::string tool_call_spec(text::ToolFormat format, const std::vector<text::ToolSpec>& tools) {
  json list = json::array();
  for (const auto& t : tools) list.push_back({t.name, t.parameters});
  return fmt::format("{}{}/{}", kTools, text::tool_format_name(format), list.dump());
}

std::shared_ptr<TokenConstraint> unbuilt_constraint(std::string spec) {
  return std::make_shared<UnbuiltConstraint>(std::move(spec));
}

Result<std::shared_ptr<TokenConstraint>> constraint_from_spec(const std::string& spec,
                                                              const text::TextCodec& text) {
  EMBER_TRY(auto build, builder(spec));
  EMBER_TRY(auto g, text.grammar(spec, build));
  return std::shared_ptr<TokenConstraint>(std::make_shared<GrammarConstraint>(std::move(g), spec));
}

}  // namespace ember::worker
