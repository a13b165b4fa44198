#include "text/json_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace ember::text {

using json = nlohmann::ordered_json;

int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return limit + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

namespace {

// Builds an ordered_json from SAX events, appending each object member in O(1): nlohmann's own
// parser inserts through ordered_map::operator[], a linear search per member, which made an
// object of n members cost n^2/2 key comparisons (20,000 members: 6.5 s; 80,000, a 870 KB
// body: 118 s). Duplicate keys keep nlohmann's meaning (the first position, the last value),
// found when the object closes: by sorting for a large object, by pairs for a small one.
class Builder final : public nlohmann::json_sax<json> {
 public:
  json root;

  bool null() override { return put(json(nullptr)); }
  bool boolean(bool v) override { return put(json(v)); }
  bool number_integer(number_integer_t v) override { return put(json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return put(json(v)); }
  bool number_float(number_float_t v, const string_t&) override { return put(json(v)); }
  bool string(string_t& v) override { return put(json(std::move(v))); }
  bool binary(binary_t& v) override { return put(json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(json::object()); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    dedupe(open_.back()->get_ref<json::object_t&>());
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return open(json::array()); }
  bool end_array() override {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  using Members = std::vector<std::pair<const std::string, json>>;

  json* put(json v) {
    if (open_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      auto& a = parent.get_ref<json::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    Members& m = parent.get_ref<json::object_t&>();  // appended as is: no search
    m.emplace_back(std::move(key_), std::move(v));
    return &m.back().second;
  }
  bool open(json v) {
    open_.push_back(put(std::move(v)));
    return true;
  }
  static void dedupe(Members& m) {
    if (m.size() < 2) return;
    if (m.size() <= 8) {  // the usual object: pairs, no allocation
      bool dup = false;
      for (size_t i = 0; i < m.size() && !dup; ++i) {
        for (size_t k = i + 1; k < m.size() && !dup; ++k) dup = m[i].first == m[k].first;
      }
      if (!dup) return;
    }
    std::vector<size_t> order(m.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return m[a].first < m[b].first; });
    std::vector<size_t> value_of = order;  // by position: whose value it keeps
    for (size_t i = 0; i < m.size(); ++i) value_of[i] = i;
    std::vector<char> drop(m.size(), 0);
    bool any = false;
    for (size_t i = 1, head = 0; i < order.size(); ++i) {
      if (m[order[i]].first != m[order[head]].first) {
        head = i;
        continue;
      }
      drop[order[i]] = 1;  // equal keys sort by position: order[head] is the first
      value_of[order[head]] = order[i];
      any = true;
    }
    if (!any) return;
    Members kept;
    kept.reserve(m.size());
    for (size_t i = 0; i < m.size(); ++i) {
      if (!drop[i]) kept.emplace_back(m[i].first, std::move(m[value_of[i]].second));
    }
    m.swap(kept);
  }

  std::vector<json*> open_;
  std::string key_;
};

}  // namespace

json parse_json_bounded(std::string_view text) {
  if (json_depth(text) > kMaxJsonDepth) return json(json::value_t::discarded);
  Builder b;
  if (!json::sax_parse(text, &b)) return json(json::value_t::discarded);
  return std::move(b.root);
}

std::string schema_depth_error(const std::string& path) {
  return fmt::format("{}: the schema nests deeper than {} levels (limit {})", path,
                     SchemaLimits::kMaxDepth, SchemaLimits::kMaxDepth);
}

namespace {

// One subschema met by the walk; `parent` and `step` rebuild its path for an error only.
struct Visit {
  const json* schema;
  int depth;
  int parent;  // index into the visit list; -1 for the root
  std::string step;
};

std::string path_of(const std::vector<Visit>& seen, int i) {
  std::vector<const std::string*> steps;
  for (; i >= 0; i = seen[size_t(i)].parent) steps.push_back(&seen[size_t(i)].step);
  std::string path = "#";
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) path += **it;
  return path;
}

}  // namespace

Result<void> check_schema_limits(const json& schema, SchemaBudget& budget) {
  std::vector<Visit> seen;  // every subschema, for paths
  std::vector<int> todo;    // indexes into `seen` still to look at
  seen.push_back({&schema, 0, -1, ""});
  todo.push_back(0);
  while (!todo.empty()) {
    const int at = todo.back();
    todo.pop_back();
    const json& s = *seen[size_t(at)].schema;
    if (!s.is_object()) continue;
    const int depth = seen[size_t(at)].depth;
    auto child = [&](const json& sub, std::string step) -> Result<void> {
      if (!sub.is_object()) return {};
      seen.push_back({&sub, depth + 1, at, std::move(step)});
      if (depth + 1 > SchemaLimits::kMaxDepth) {
        return Error{schema_depth_error(path_of(seen, int(seen.size() - 1)))};
      }
      todo.push_back(int(seen.size() - 1));
      return {};
    };
    auto add_chars = [&](size_t n) -> Result<void> {
      budget.chars += n;
      if (budget.chars > SchemaLimits::kMaxChars) {
        return fail(
            "{}: the schemas' property names and enum strings are over {} characters in total "
            "(limit {})",
            path_of(seen, at), SchemaLimits::kMaxChars, SchemaLimits::kMaxChars);
      }
      return {};
    };
    auto add_values = [&](size_t n) -> Result<void> {
      budget.enum_values += n;
      if (budget.enum_values > SchemaLimits::kMaxEnumValues) {
        return fail("{}: the schemas list over {} enum values in total (limit {})",
                    path_of(seen, at), SchemaLimits::kMaxEnumValues, SchemaLimits::kMaxEnumValues);
      }
      return {};
    };
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& key = it.key();
      const json& v = *it;
      if (key == "properties" || key == "$defs" || key == "definitions" ||
          key == "patternProperties") {
        if (!v.is_object()) continue;
        if (key == "properties" || key == "$defs" || key == "definitions") {
          budget.properties += v.size();
          if (budget.properties > SchemaLimits::kMaxProperties) {
            return fail(
                "{}: the schemas have over {} properties and definitions in total (limit {})",
                path_of(seen, at), SchemaLimits::kMaxProperties, SchemaLimits::kMaxProperties);
          }
        }
        for (auto m = v.begin(); m != v.end(); ++m) {
          EMBER_TRY_STATUS(add_chars(m.key().size()));
          EMBER_TRY_STATUS(child(*m, "/" + key + "/" + m.key()));
        }
      } else if (key == "anyOf" || key == "oneOf" || key == "allOf" || key == "prefixItems" ||
                 (key == "items" && v.is_array())) {
        if (!v.is_array()) continue;
        for (size_t i = 0; i < v.size(); ++i) {
          EMBER_TRY_STATUS(child(v[i], fmt::format("/{}/{}", key, i)));
        }
      } else if (key == "items" || key == "additionalProperties" || key == "not" ||
                 key == "contains" || key == "propertyNames" || key == "additionalItems" ||
                 key == "if" || key == "then" || key == "else") {
        if (v.is_object()) EMBER_TRY_STATUS(child(v, "/" + key));
      } else if (key == "enum" && v.is_array()) {
        EMBER_TRY_STATUS(add_values(v.size()));
        for (const json& e : v) {
          if (e.is_string()) EMBER_TRY_STATUS(add_chars(e.get_ref<const std::string&>().size()));
        }
      } else if (key == "const") {
        EMBER_TRY_STATUS(add_values(1));
        if (v.is_string()) EMBER_TRY_STATUS(add_chars(v.get_ref<const std::string&>().size()));
      }
    }
  }
  return {};
}

}  // namespace ember::text
