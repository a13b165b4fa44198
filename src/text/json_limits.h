// Bounds on JSON that clients and models supply: how deep a document may nest before anything
// parses or walks it, and how large a JSON schema (structured output, tool parameters) may be
// before it is compiled into a grammar. Every limit is a named constant, documented in
// docs/operations.md ("Limits on requests"), and every refusal names the limit it hit.
//
// The schema limits follow those OpenAI documents for structured outputs (5,000 properties,
// 1,000 enum values, 120,000 characters of names and enum strings); nesting is counted per
// subschema step (a property, items, additionalProperties, an anyOf/oneOf/allOf alternative, a
// definition, a $ref's target), so its limit is more generous than OpenAI's 10 object levels.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/result.h"

namespace ember::text {

// A JSON document (a request body, tool-call arguments, a model's tool call) nests arrays and
// objects at most this deep.
inline constexpr int kMaxJsonDepth = 128;

struct SchemaLimits {
  static constexpr int kMaxDepth = 32;            // subschema steps from the root
  static constexpr size_t kMaxProperties = 5000;  // "properties" members, in total
  static constexpr size_t kMaxEnumValues = 1000;  // "enum" values and "const"s, in total
  static constexpr size_t kMaxChars = 120'000;    // bytes of property names + enum strings
};

// The deepest nesting of arrays and objects in `text` (JSON or not: brackets inside strings do
// not count), or limit + 1 as soon as it passes `limit`. Linear, no allocation.
int json_depth(std::string_view text, int limit = kMaxJsonDepth);

// Parses client or model JSON (discarded when invalid): a document nesting deeper than
// kMaxJsonDepth is discarded unparsed, and an object's members are appended in order in
// constant time each (nlohmann's parse into ordered_json searches the object for every member:
// quadratic in its size). Duplicate keys: the first position, the last value, as nlohmann's.
nlohmann::ordered_json parse_json_bounded(std::string_view text);

// What the schemas of one request have used of the limits (tools share one budget: their
// parameters compile into one grammar).
struct SchemaBudget {
  size_t properties = 0, enum_values = 0, chars = 0;
};

// Checks `schema` against SchemaLimits without recursion (a walk with its own stack), adding
// its counts to `budget`. The error names the limit and where it was passed ("#/properties/a:
// ..."). Linear in the schema's size.
Result<void> check_schema_limits(const nlohmann::ordered_json& schema, SchemaBudget& budget);

// The error text for nesting past SchemaLimits::kMaxDepth at `path` (the compiler reports
// $ref chains the walk cannot see with the same words).
std::string schema_depth_error(const std::string& path);

}  // namespace ember::text
