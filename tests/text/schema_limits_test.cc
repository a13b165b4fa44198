// The bounds on client-supplied JSON and schemas (text/json_limits.h): each limit is refused
// with an error that names it, nothing recurses without a bound (a schema nested 10,000 deep is
// an error, not a crash), and a schema at the limits compiles in space linear in its size.
#include "text/json_limits.h"

#include <gtest/gtest.h>

#include <string>

#include "text/grammar.h"
#include "text/tool_calls.h"

namespace ember::text {
namespace {

using json = nlohmann::ordered_json;

// {"type":"object","properties":{"a":{...}}} nested `levels` deep.
std::string nested_properties(int levels) {
  std::string s;
  for (int i = 0; i < levels; ++i) s += R"({"type":"object","properties":{"a":)";
  s += R"({"type":"string"})";
  for (int i = 0; i < levels; ++i) s += "}}";
  return s;
}

std::string error_of(const std::string& schema) {
  auto g = Grammar::from_schema(json::parse(schema));
  EXPECT_FALSE(g.ok()) << schema.substr(0, 200);
  return g.ok() ? "" : g.message();
}

// Optional properties p0..p(n-1), each a string.
json wide_object(size_t n) {
  json props = json::object();
  for (size_t i = 0; i < n; ++i) props["p" + std::to_string(i)] = {{"type", "string"}};
  return {{"type", "object"}, {"properties", props}};
}

TEST(SchemaLimits, nesting_past_the_limit_is_refused_naming_it) {
  const int limit = SchemaLimits::kMaxDepth;
  EXPECT_TRUE(Grammar::from_schema(json::parse(nested_properties(limit))).ok());
  std::string e = error_of(nested_properties(limit + 1));
  EXPECT_NE(e.find("nests deeper than 32 levels (limit 32)"), std::string::npos) << e;
  EXPECT_EQ(e.find("#/properties/a/properties/a"), 0u) << e;
  // anyOf and items count as levels too.
  std::string deep;
  for (int i = 0; i <= limit; ++i) deep += R"({"anyOf":[{"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i <= limit; ++i) deep += "},{\"type\":\"null\"}]}";
  EXPECT_NE(error_of(deep).find("(limit 32)"), std::string::npos);
}

TEST(SchemaLimits, a_schema_nested_ten_thousand_deep_is_an_error_not_a_crash) {
  EXPECT_NE(error_of(nested_properties(10'000)).find("(limit 32)"), std::string::npos);
  std::string arrays;
  for (int i = 0; i < 10'000; ++i) arrays += R"({"type":"array","items":)";
  arrays += "{}" + std::string(10'000, '}');
  EXPECT_NE(error_of(arrays).find("(limit 32)"), std::string::npos);
  // Moved in, not copied: copying a JSON value recurses once per level (a client's body is
  // never this deep: its nesting is refused at 128 levels before it is parsed).
  std::vector<ToolSpec> deep;
  deep.push_back({"f", json::parse(nested_properties(10'000))});
  auto tools = tool_call_grammar(ToolFormat::Hermes, deep);
  ASSERT_FALSE(tools.ok());
  EXPECT_NE(tools.message().find("tool 'f' parameters: "), std::string::npos) << tools.message();
}

TEST(SchemaLimits, a_ref_chain_counts_each_step_as_a_level) {
  // #/$defs/d0 -> d1 -> ... -> d49: shallow JSON that the walk passes, deep once followed.
  json defs = json::object();
  for (int i = 0; i < 50; ++i) {
    defs["d" + std::to_string(i)] =
        i == 49 ? json{{"type", "string"}} : json{{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  }
  json schema = {{"$ref", "#/$defs/d0"}, {"$defs", defs}};
  SchemaBudget b;
  EXPECT_TRUE(check_schema_limits(schema, b).ok());
  auto g = Grammar::from_schema(schema);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("(limit 32)"), std::string::npos) << g.message();
  // A recursive schema is not a chain: it compiles (the recognizer bounds the nesting).
  EXPECT_TRUE(
      Grammar::from_schema(
          json::parse(
              R"({"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#"}}}})"))
          .ok());
}

TEST(SchemaLimits, properties_past_the_limit_are_refused_naming_it) {
  EXPECT_TRUE(Grammar::from_schema(wide_object(SchemaLimits::kMaxProperties)).ok());
  auto g = Grammar::from_schema(wide_object(SchemaLimits::kMaxProperties + 1));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("over 5000 properties and definitions in total (limit 5000)"),
            std::string::npos)
      << g.message();
  // Tools share one budget: two tools of 3,000 properties each are over it together.
  auto t =
      tool_call_grammar(ToolFormat::Hermes, {{"a", wide_object(3000)}, {"b", wide_object(3000)}});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find(
                "tool 'b' parameters: #: the schemas have over 5000 properties and definitions"),
            std::string::npos)
      << t.message();
}

TEST(SchemaLimits, enum_values_past_the_limit_are_refused_naming_it) {
  json values = json::array();
  for (size_t i = 0; i < SchemaLimits::kMaxEnumValues; ++i) values.push_back(i);
  EXPECT_TRUE(Grammar::from_schema({{"enum", values}}).ok());
  values.push_back(-1);
  auto g = Grammar::from_schema({{"type", "object"}, {"properties", {{"e", {{"enum", values}}}}}});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.message(),
            "#/properties/e: the schemas list over 1000 enum values in total (limit 1000)");
}

TEST(SchemaLimits, characters_of_names_and_enum_strings_past_the_limit_are_refused_naming_it) {
  json ok = {{"enum", {std::string(SchemaLimits::kMaxChars - 1, 'x'), "y"}}};
  EXPECT_TRUE(Grammar::from_schema(ok).ok());
  json over = {
      {"type", "object"},
      {"properties", {{std::string(60'000, 'k'), {{"enum", {std::string(60'001, 'v')}}}}}}};
  auto g = Grammar::from_schema(over);
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("over 120000 characters in total (limit 120000)"), std::string::npos)
      << g.message();
}

// The bytes of every literal and tag in the grammar: what a compiled schema holds in memory.
size_t grammar_bytes(const Grammar& g) {
  size_t bytes = 0;
  for (uint32_t i = 0; i < g.node_count(); ++i) {
    const GrammarNode& n = g.node(i);
    bytes += sizeof(GrammarNode) + n.parts.size() * 4 + n.next_required.size() * 4;
    for (const auto& l : n.lits) bytes += l.size() + 8;
    for (const auto& p : n.props) bytes += p.name.size() + 8;
  }
  return bytes;
}

TEST(SchemaLimits, a_wide_schema_at_the_limit_compiles_in_linear_space) {
  // 5,000 optional properties: every key may come after every earlier one. A key set per
  // position (what object() built before) holds n^2/2 keys, ~12.5 million here (~150 MB).
  const size_t n = SchemaLimits::kMaxProperties;
  auto g = Grammar::from_schema(wide_object(n));
  ASSERT_TRUE(g.ok()) << g.message();
  size_t key_bytes = 0;
  for (size_t i = 0; i < n; ++i) key_bytes += json("p" + std::to_string(i)).dump().size() + 1;
  EXPECT_LT(grammar_bytes(*g), 2 * (16 * n + 2 * key_bytes) + 64 * sizeof(GrammarNode));
  // ...and still means "any subset, in order".
  Machine m(*g);
  EXPECT_TRUE(m.step(R"({"p3":"a","p4999":"b"})") && m.can_end());
  Machine back(*g);
  EXPECT_FALSE(back.step(R"({"p4999":"b","p3")")) << "a key before the one that came";
  Machine twice(*g);
  EXPECT_FALSE(twice.step(R"({"p7":"b","p7")")) << "a key twice";
}

TEST(SchemaLimits, keys_match_only_from_the_next_property_to_the_next_required_one) {
  auto g = Grammar::from_schema(json::parse(R"({"type":"object","properties":{
      "ab":{"type":"integer"},"a":{"type":"integer"},"abc":{"type":"integer"},
      "r":{"type":"integer"},"z":{"type":"integer"}},"required":["r"]})"));
  ASSERT_TRUE(g.ok()) << g.message();
  auto accepts = [&](std::string_view s) {
    Machine m(*g);
    return m.step(s) && m.can_end();
  };
  EXPECT_TRUE(accepts(R"({"ab":1,"a":2,"abc":3,"r":4,"z":5})"));
  EXPECT_TRUE(accepts(R"({"abc":3,"r":4})"));
  EXPECT_TRUE(accepts(R"({"r":4})"));
  EXPECT_FALSE(accepts(R"({"z":5})")) << "skips the required r";
  EXPECT_FALSE(accepts(R"({"a":2,"ab":1,"r":4})")) << "ab after a";
  EXPECT_FALSE(accepts(R"({"ab":1})")) << "r missing";
  Machine m(*g);
  ASSERT_TRUE(m.step(R"({"a":2,"ab)"));
  EXPECT_FALSE(Machine(m).step("\"")) << "\"ab\" came before \"a\"";
  EXPECT_FALSE(m.step("c\":3}")) << "r still required";
}

TEST(JsonLimits, depth_counts_brackets_outside_strings_and_stops_past_the_limit) {
  EXPECT_EQ(json_depth(R"({"a":[1,{"b":"[[[{{"}]})"), 3);
  EXPECT_EQ(json_depth(R"(["\"[[", "\\"])"), 1);
  EXPECT_EQ(json_depth(std::string(100'000, '['), 128), 129);
  EXPECT_TRUE(parse_json_bounded(std::string(200, '[') + std::string(200, ']')).is_discarded());
  EXPECT_FALSE(parse_json_bounded(std::string(128, '[') + std::string(128, ']')).is_discarded());
}

TEST(JsonLimits, parsing_keeps_member_order_and_nlohmanns_meaning_of_duplicate_keys) {
  json j = parse_json_bounded(R"({"b":1,"a":{"y":[1,{"z":null}],"x":2.5},"b":3,"c":"s"})");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j.dump(), R"({"b":3,"a":{"y":[1,{"z":null}],"x":2.5},"c":"s"})");
  EXPECT_EQ(j, json::parse(R"({"b":1,"a":{"y":[1,{"z":null}],"x":2.5},"b":3,"c":"s"})"));
  std::string big = "{";
  for (int i = 0; i < 20; ++i)
    big += "\"k" + std::to_string(i % 7) + "\":" + std::to_string(i) + ",";
  big += "\"end\":true}";
  EXPECT_EQ(parse_json_bounded(big).dump(), json::parse(big).dump());
  EXPECT_TRUE(parse_json_bounded(R"({"a":})").is_discarded());
  EXPECT_TRUE(parse_json_bounded("").is_discarded());
  EXPECT_EQ(parse_json_bounded("7"), json(7));
}

TEST(JsonLimits, an_object_of_400_000_members_parses_in_linear_time) {
  // nlohmann's parse into ordered_json searches the object for each member: 100,000 members
  // took 29 s on a loaded 2-core host, so this object runs past ctest's 300 s timeout without
  // the linear parse (no timing assertion here: the timeout is the bound).
  std::string body = "{";
  for (int i = 0; i < 400'000; ++i) body += "\"k" + std::to_string(i) + "\":0,";
  body += "\"k0\":1}";
  json j = parse_json_bounded(body);
  ASSERT_EQ(j.size(), 400'000u);
  EXPECT_EQ(j.begin().key(), "k0");
  EXPECT_EQ(j.begin().value(), 1);
  EXPECT_EQ((--j.end()).key(), "k399999");
}

}  // namespace
}  // namespace ember::text
