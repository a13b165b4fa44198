#include "text/grammar.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "text/json_limits.h"

namespace ember::text {

using json = nlohmann::ordered_json;

namespace {

enum FrameKind : uint8_t { kValue = 1, kObj, kArr, kStr, kNum, kLit, kSeq };
enum ObjState : uint8_t { kAfterOpen, kInKey, kAfterKey, kInValue, kAfterValue, kAfterComma };
enum ArrState : uint8_t { kArrOpen, kArrInValue, kArrAfterValue };

void set_bit(std::array<uint64_t, 4>& s, uint8_t b) {
  s[b >> 6] |= uint64_t{1} << (b & 63);
}
bool has_bit(const std::array<uint64_t, 4>& s, uint8_t b) {
  return (s[b >> 6] >> (b & 63)) & 1;
}
bool is_digit(uint8_t c) {
  return c >= '0' && c <= '9';
}
bool is_hex(uint8_t c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// A literal frame's position: the bytes matched so far, in `a` and `state` (24 bits: a
// literal is at most SchemaLimits::kMaxChars bytes long, plus quotes).
uint32_t lit_pos(const Machine::Frame& f) {
  return f.a | uint32_t{f.state} << 16;
}
void set_lit_pos(Machine::Frame& f, uint32_t pos) {
  f.a = static_cast<uint16_t>(pos);
  f.state = static_cast<uint8_t>(pos >> 16);
}

}  // namespace

uint32_t Grammar::add(GrammarNode n) {
  nodes_.push_back(std::move(n));
  return static_cast<uint32_t>(nodes_.size() - 1);
}

uint32_t Grammar::add_literals(std::vector<std::pair<std::string, uint32_t>> lits_and_next) {
  std::vector<size_t> order(lits_and_next.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return lits_and_next[a].first < lits_and_next[b].first; });
  GrammarNode n;
  n.kind = NodeKind::Literals;
  for (size_t i : order) {
    EMBER_ASSERT(!lits_and_next[i].first.empty());
    set_bit(n.first, static_cast<uint8_t>(lits_and_next[i].first[0]));
    n.lits.push_back(lits_and_next[i].first);
    n.lit_tags.push_back(static_cast<uint32_t>(i));
    n.lit_next.push_back(lits_and_next[i].second);
  }
  return add(std::move(n));
}

uint32_t Grammar::add_seq(std::vector<uint32_t> parts) {
  EMBER_ASSERT(!parts.empty());
  GrammarNode n;
  n.kind = NodeKind::Seq;
  n.first = nodes_[parts[0]].first;
  n.parts = std::move(parts);
  return add(std::move(n));
}

// ---- JSON schema -> nodes ----

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const json& root) : g_(g), root_(root) {}

  Result<uint32_t> compile(const json& s, const std::string& path);
  uint32_t any();

 private:
  Result<uint32_t> compile_at_depth(const json& s, const std::string& path);
  uint32_t reserve() { return g_.add(GrammarNode{}); }
  Result<uint32_t> type_node(const std::string& type, const json& s, const std::string& path);
  Result<uint32_t> object(const json& s, const std::string& path);
  Result<uint32_t> any_of(std::vector<uint32_t> alts, const std::string& path);
  Result<uint32_t> literals(const json& values, const std::string& path);
  uint32_t plain_string();
  uint32_t number(bool integer, bool non_negative);

  Grammar& g_;
  const json& root_;
  std::map<std::string, uint32_t> refs_;
  uint32_t any_ = kNoNode, string_ = kNoNode;
  int depth_ = -1;  // subschema steps from the root of the schema being compiled
};

uint32_t SchemaCompiler::plain_string() {
  if (string_ == kNoNode) {
    GrammarNode n;
    n.kind = NodeKind::String;
    set_bit(n.first, '"');
    string_ = g_.add(std::move(n));
  }
  return string_;
}

uint32_t SchemaCompiler::number(bool integer, bool non_negative) {
  GrammarNode n;
  n.kind = NodeKind::Number;
  n.integer = integer;
  n.non_negative = non_negative;
  for (uint8_t c = '0'; c <= '9'; ++c) set_bit(n.first, c);
  if (!non_negative) set_bit(n.first, '-');
  return g_.add(std::move(n));
}

// Any JSON value: objects with any keys, arrays, strings, numbers, true, false, null.
uint32_t SchemaCompiler::any() {
  if (any_ != kNoNode) return any_;
  any_ = reserve();
  GrammarNode obj;
  obj.kind = NodeKind::Object;
  obj.free_object = true;
  obj.parts = {plain_string()};
  obj.items = any_;
  set_bit(obj.first, '{');
  GrammarNode arr;
  arr.kind = NodeKind::Array;
  arr.items = any_;
  set_bit(arr.first, '[');
  std::vector<uint32_t> alts = {
      g_.add(std::move(obj)), g_.add(std::move(arr)), plain_string(), number(false, false),
      g_.add_literals({{"true", kNoNode}, {"false", kNoNode}, {"null", kNoNode}})};
  GrammarNode n;
  n.kind = NodeKind::AnyOf;
  for (uint32_t a : alts) {
    for (int w = 0; w < 4; ++w) n.first[size_t(w)] |= g_.nodes_[a].first[size_t(w)];
  }
  n.parts = std::move(alts);
  g_.nodes_[any_] = std::move(n);
  return any_;
}

Result<uint32_t> SchemaCompiler::literals(const json& values, const std::string& path) {
  std::vector<std::pair<std::string, uint32_t>> lits;
  std::set<std::string> seen;
  for (const json& v : values) {
    std::string text = v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() >= (size_t{1} << 24)) {
      return fail("{}: an 'enum' or 'const' value is over {} bytes", path, (size_t{1} << 24) - 1);
    }
    if (seen.insert(text).second) lits.emplace_back(std::move(text), kNoNode);
  }
  if (lits.empty()) return fail("{}: 'enum' must list at least one value", path);
  return g_.add_literals(std::move(lits));
}

Result<uint32_t> SchemaCompiler::any_of(std::vector<uint32_t> alts, const std::string& path) {
  // Numbers of both kinds: the general one covers the integer one.
  std::vector<uint32_t> kept;
  for (uint32_t a : alts) {
    const GrammarNode& n = g_.nodes_[a];
    bool dup = false;
    for (uint32_t& k : kept) {
      GrammarNode& m = g_.nodes_[k];
      if (n.kind == NodeKind::Number && m.kind == NodeKind::Number) {
        if (m.integer && !n.integer) k = a;
        dup = true;
      }
    }
    if (!dup) kept.push_back(a);
  }
  if (kept.size() == 1) return kept[0];
  GrammarNode n;
  n.kind = NodeKind::AnyOf;
  for (size_t i = 0; i < kept.size(); ++i) {
    const auto& fi = g_.nodes_[kept[i]].first;
    for (size_t w = 0; w < 4; ++w) {
      if (n.first[w] & fi[w]) {
        return fail(
            "{}: 'anyOf' alternatives that begin alike (e.g. two object types) are not "
            "supported",
            path);
      }
      n.first[w] |= fi[w];
    }
  }
  n.parts = std::move(kept);
  return g_.add(std::move(n));
}

Result<uint32_t> SchemaCompiler::object(const json& s, const std::string& path) {
  GrammarNode n;
  n.kind = NodeKind::Object;
  set_bit(n.first, '{');
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return fail("{}: 'required' must be an array", path);
    for (const json& r : *it) {
      if (!r.is_string()) return fail("{}: 'required' must list strings", path);
      required.insert(r.get<std::string>());
    }
  }
  auto props = s.find("properties");
  if (props != s.end() && !props->is_object()) {
    return fail("{}: 'properties' must be an object", path);
  }
  if (props == s.end() || props->empty()) {
    n.free_object = true;
    n.parts = {plain_string()};
    n.items = any();
    if (auto ap = s.find("additionalProperties"); ap != s.end() && ap->is_object()) {
      EMBER_TRY(n.items, compile(*ap, path + "/additionalProperties"));
    } else if (ap != s.end() && ap->is_boolean() && !ap->get<bool>()) {
      n.free_object = false;  // {} only
    }
    return g_.add(std::move(n));
  }
  size_t required_found = 0;
  for (auto it = props->begin(); it != props->end(); ++it) {
    GrammarNode::Property p;
    p.name = it.key();
    p.required = required.count(p.name) > 0;
    required_found += p.required;
    EMBER_TRY(p.value, compile(*it, path + "/properties/" + p.name));
    n.props.push_back(std::move(p));
  }
  if (required_found != required.size()) {  // (a lookup per name would be quadratic)
    std::set<std::string> names;
    for (const auto& p : n.props) names.insert(p.name);
    for (const auto& r : required) {
      if (!names.count(r)) {
        return fail("{}: required property '{}' is not among the properties", path, r);
      }
    }
  }
  const uint32_t self = reserve();
  std::vector<std::pair<std::string, uint32_t>> keys;  // tags: the properties' indexes
  keys.reserve(n.props.size());
  for (const auto& p : n.props) keys.emplace_back(json(p.name).dump() + ":", kNoNode);
  n.keys = g_.add_literals(std::move(keys));
  g_.nodes_[n.keys].object_keys = true;
  const auto count = static_cast<uint32_t>(n.props.size());
  n.next_required.assign(count + 1, count);
  for (uint32_t i = count; i-- > 0;) {
    n.next_required[i] = n.props[i].required ? i : n.next_required[i + 1];
  }
  g_.nodes_[self] = std::move(n);
  return self;
}

Result<uint32_t> SchemaCompiler::type_node(const std::string& type, const json& s,
                                           const std::string& path) {
  if (type == "object") return object(s, path);
  if (type == "array") {
    GrammarNode n;
    n.kind = NodeKind::Array;
    set_bit(n.first, '[');
    if (auto it = s.find("items"); it != s.end() && !it->is_boolean()) {
      EMBER_TRY(n.items, compile(*it, path + "/items"));
    } else {
      n.items = any();
    }
    n.min_count = s.value("minItems", 0);
    n.max_count = s.value("maxItems", -1);
    if (n.max_count >= 0 && n.max_count < n.min_count) {
      return fail("{}: maxItems is below minItems", path);
    }
    return g_.add(std::move(n));
  }
  if (type == "string") {
    if (!s.contains("minLength") && !s.contains("maxLength")) return plain_string();
    GrammarNode n;
    n.kind = NodeKind::String;
    set_bit(n.first, '"');
    n.min_count = s.value("minLength", 0);
    n.max_count = s.value("maxLength", -1);
    return g_.add(std::move(n));
  }
  if (type == "integer" || type == "number") {
    bool non_negative = false;
    for (const char* k : {"minimum", "exclusiveMinimum"}) {
      if (auto it = s.find(k); it != s.end()) {
        if (!it->is_number() || it->get<double>() < 0) {
          return fail("{}: '{}' below 0 is not supported (only a non-negative minimum is)", path,
                      k);
        }
        non_negative = true;
      }
    }
    return number(type == "integer", non_negative);
  }
  if (type == "boolean") {
    return g_.add_literals({{"true", kNoNode}, {"false", kNoNode}});
  }
  if (type == "null") return g_.add_literals({{"null", kNoNode}});
  return fail("{}: unknown type '{}'", path, type);
}

// Every nested schema (a property, items, an alternative, a $ref's target) is compiled through
// here, one level deeper: a bound on the recursion that also covers $ref chains, which
// check_schema_limits cannot follow.
Result<uint32_t> SchemaCompiler::compile(const json& s, const std::string& path) {
  if (depth_ + 1 > SchemaLimits::kMaxDepth) return Error{schema_depth_error(path)};
  ++depth_;
  auto r = compile_at_depth(s, path);
  --depth_;
  return r;
}

Result<uint32_t> SchemaCompiler::compile_at_depth(const json& s, const std::string& path) {
  if (s.is_boolean()) {
    if (!s.get<bool>()) return fail("{}: the schema 'false' allows no value", path);
    return any();
  }
  if (!s.is_object()) return fail("{}: a schema must be an object", path);
  static const char* const kUnsupported[] = {"pattern",
                                             "format",
                                             "patternProperties",
                                             "propertyNames",
                                             "prefixItems",
                                             "contains",
                                             "not",
                                             "if",
                                             "then",
                                             "else",
                                             "dependentRequired",
                                             "dependentSchemas",
                                             "minProperties",
                                             "maxProperties",
                                             "multipleOf",
                                             "maximum",
                                             "exclusiveMaximum",
                                             "uniqueItems",
                                             "unevaluatedProperties",
                                             "unevaluatedItems",
                                             "dependencies",
                                             "additionalItems"};
  for (const char* k : kUnsupported) {
    if (s.contains(k)) {
      if (std::string_view(k) == "uniqueItems" && s[k] == false) continue;
      return fail("{}: the schema feature '{}' is not supported", path, k);
    }
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return fail("{}: '$ref' must be a string", path);
    const std::string ref = it->get<std::string>();
    if (auto r = refs_.find(ref); r != refs_.end()) return r->second;
    if (!ref.starts_with("#")) {
      return fail("{}: the schema feature '$ref' to another document ('{}') is not supported", path,
                  ref);
    }
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(ref.substr(1));
    } catch (const json::exception&) {
      return fail("{}: '$ref' '{}' is not a JSON pointer", path, ref);
    }
    if (!root_.contains(ptr)) return fail("{}: '$ref' '{}' points nowhere", path, ref);
    // Reserved first: a recursive reference finds this node while it is being compiled.
    const uint32_t slot = reserve();
    refs_[ref] = slot;
    EMBER_TRY(uint32_t target, compile(root_.at(ptr), ref));
    GrammarNode seq;  // a one-part sequence: an alias of the target
    seq.kind = NodeKind::Seq;
    seq.parts = {target};
    seq.first = g_.nodes_[target].first;
    g_.nodes_[slot] = std::move(seq);
    return slot;
  }
  if (auto it = s.find("const"); it != s.end()) return literals(json::array({*it}), path);
  if (auto it = s.find("enum"); it != s.end()) {
    if (!it->is_array()) return fail("{}: 'enum' must be an array", path);
    return literals(*it, path);
  }
  for (const char* k : {"anyOf", "oneOf"}) {
    if (auto it = s.find(k); it != s.end()) {
      if (!it->is_array() || it->empty())
        return fail("{}: '{}' must be a non-empty array", path, k);
      std::vector<uint32_t> alts;
      for (size_t i = 0; i < it->size(); ++i) {
        EMBER_TRY(uint32_t a, compile((*it)[i], fmt::format("{}/{}/{}", path, k, i)));
        alts.push_back(a);
      }
      return any_of(std::move(alts), path);
    }
  }
  if (auto it = s.find("allOf"); it != s.end()) {
    if (!it->is_array() || it->size() != 1) {
      return fail("{}: the schema feature 'allOf' is supported with one schema only", path);
    }
    return compile((*it)[0], path + "/allOf/0");
  }
  auto type = s.find("type");
  if (type == s.end()) {
    if (s.contains("properties")) return object(s, path);
    if (s.contains("items")) return type_node("array", s, path);
    return any();
  }
  if (type->is_string()) return type_node(type->get<std::string>(), s, path);
  if (type->is_array() && !type->empty()) {
    std::vector<uint32_t> alts;
    std::set<std::string> done;  // each type once: a repeated one would compile its subschemas
                                 // again at every level (exponential in the depth)
    for (const json& t : *type) {
      if (!t.is_string()) return fail("{}: 'type' must list strings", path);
      if (!done.insert(t.get<std::string>()).second) continue;
      EMBER_TRY(uint32_t a, type_node(t.get<std::string>(), s, path));
      alts.push_back(a);
    }
    return any_of(std::move(alts), path);
  }
  return fail("{}: 'type' must be a string or an array of strings", path);
}

Grammar Grammar::any_object() {
  Grammar g;
  json schema = {{"type", "object"}};
  SchemaCompiler c(g, schema);
  g.root_ = c.compile(schema, "#").value();
  return g;
}

Result<uint32_t> Grammar::add_schema(const nlohmann::ordered_json& schema) {
  SchemaCompiler c(*this, schema);
  return c.compile(schema, "#");
}

Result<Grammar> Grammar::from_schema(const nlohmann::ordered_json& schema) {
  SchemaBudget budget;
  EMBER_TRY_STATUS(check_schema_limits(schema, budget));
  Grammar g;
  EMBER_TRY(g.root_, g.add_schema(schema));
  return g;
}

// ---- Machine ----

Machine::Machine(const Grammar& g) : g_(&g) {
  EMBER_ASSERT(g.root() != kNoNode);
  push(kValue, g.root());
}

bool Machine::push(uint8_t kind, uint32_t node) {
  if (depth_ == kMaxDepth) return false;
  frames_[size_t(depth_++)] = Frame{kind, 0, 0, node, 0, 0};
  return true;
}

// The top frame has just completed with `tag`; tell its parent. Returns false if the parent
// cannot continue (nesting too deep).
void Machine::child_done(uint32_t tag) {
  --depth_;
  while (depth_ > 0) {
    Frame& f = frames_[size_t(depth_ - 1)];
    const GrammarNode& n = g_->node(f.node);
    if (f.kind == kObj) {
      if (f.state == kInKey) {
        if (n.free_object) {
          f.state = kAfterKey;
        } else {
          f.b = tag + 1;
          f.state = kInValue;
          if (!push(kValue, n.props[tag].value)) depth_ = -1;
        }
      } else {
        f.state = kAfterValue;
      }
      return;
    }
    if (f.kind == kArr) {
      f.state = kArrAfterValue;
      ++f.b;
      return;
    }
    EMBER_ASSERT(f.kind == kSeq);
    if (++f.a < n.parts.size()) {
      if (!push(kValue, n.parts[f.a])) depth_ = -1;
      return;
    }
    --depth_;  // the sequence is complete: tell its parent
    tag = 0;
  }
}

bool Machine::step(std::string_view bytes) {
  for (char c : bytes) {
    if (!step(static_cast<uint8_t>(c))) return false;
  }
  return true;
}

bool Machine::step(uint8_t ch) {
  for (;;) {
    if (depth_ <= 0) return false;
    Frame& f = frames_[size_t(depth_ - 1)];
    const GrammarNode& n = g_->node(f.node);
    switch (f.kind) {
      case kValue:
        switch (n.kind) {
          case NodeKind::Object:
            if (ch != '{') return false;
            f = Frame{kObj, kAfterOpen, 0, f.node, 0, 0};
            return true;
          case NodeKind::Array:
            if (ch != '[') return false;
            f = Frame{kArr, kArrOpen, 0, f.node, 0, 0};
            return true;
          case NodeKind::String:
            if (ch != '"') return false;
            f = Frame{kStr, 0, 0, f.node, 0, 0};
            return true;
          case NodeKind::Number:
            f = Frame{kNum, 0, 0, f.node, 0, 0};
            continue;
          case NodeKind::Literals:
            f = Frame{kLit, 0, 0, f.node, 0, static_cast<uint32_t>(n.lits.size())};
            continue;
          case NodeKind::AnyOf: {
            uint32_t pick = kNoNode;
            for (uint32_t alt : n.parts) {
              if (has_bit(g_->node(alt).first, ch)) pick = alt;
            }
            if (pick == kNoNode) return false;
            f.node = pick;
            continue;
          }
          case NodeKind::Seq:
            f = Frame{kSeq, 0, 0, f.node, 0, 0};
            if (!push(kValue, n.parts[0])) return false;
            continue;
        }
        return false;
      case kObj: {
        auto can_close = [&] {
          return n.free_object || n.props.empty() || n.next_required[f.b] == n.props.size();
        };
        auto more_keys = [&] { return n.free_object || f.b < n.props.size(); };
        if (f.state == kAfterOpen || f.state == kAfterComma) {
          if (f.state == kAfterOpen && ch == '}' && can_close()) {
            child_done(0);
            return depth_ >= 0;
          }
          if (!more_keys()) return false;
          f.state = kInKey;
          if (!push(kValue, n.free_object ? n.parts[0] : n.keys)) return false;
          continue;
        }
        if (f.state == kAfterKey) {
          if (ch != ':') return false;
          f.state = kInValue;
          return push(kValue, n.items);
        }
        if (f.state == kAfterValue) {
          if (ch == ',' && more_keys()) {
            f.state = kAfterComma;
            return true;
          }
          if (ch == '}' && can_close()) {
            child_done(0);
            return depth_ >= 0;
          }
        }
        return false;
      }
      case kArr:
        if (f.state == kArrOpen) {
          if (ch == ']' && n.min_count == 0) {
            child_done(0);
            return depth_ >= 0;
          }
          if (n.max_count == 0) return false;
          f.state = kArrInValue;
          if (!push(kValue, n.items)) return false;
          continue;
        }
        if (f.state == kArrAfterValue) {
          if (ch == ',' && (n.max_count < 0 || f.b < uint32_t(n.max_count))) {
            f.state = kArrInValue;
            return push(kValue, n.items);
          }
          if (ch == ']' && f.b >= uint32_t(n.min_count)) {
            child_done(0);
            return depth_ >= 0;
          }
        }
        return false;
      case kStr: {
        const bool counted = n.min_count > 0 || n.max_count >= 0;
        if (f.a > 0) {  // inside a multi-byte UTF-8 character
          // f.c: the range the first continuation byte must be in (no overlong forms, no
          // surrogates, nothing above U+10FFFF), as lo << 8 | hi; 0 once past it.
          const uint8_t lo = f.c ? uint8_t(f.c >> 8) : 0x80, hi = f.c ? uint8_t(f.c) : 0xBF;
          if (ch < lo || ch > hi) return false;
          f.c = 0;
          if (--f.a == 0 && counted) ++f.b;
          return true;
        }
        if (f.state == 1) {  // after a backslash
          if (ch == 'u') {
            f.state = 5;  // four hex digits to come
            return true;
          }
          if (std::string_view("\"\\/bfnrt").find(char(ch)) == std::string_view::npos) {
            return false;
          }
          f.state = 0;
          if (counted) ++f.b;
          return true;
        }
        if (f.state >= 2) {
          if (!is_hex(ch)) return false;
          // No surrogates (\uD800-\uDFFF): a lone one is not text; raw UTF-8 covers the rest.
          if (f.state == 5) f.c = (ch == 'd' || ch == 'D') ? 1 : 0;
          if (f.state == 4 && f.c == 1 && !is_digit(ch)) return false;
          if (f.state == 4 && f.c == 1 && ch >= '8') return false;
          if (f.state == 4) f.c = 0;
          if (--f.state == 1) {
            f.state = 0;
            if (counted) ++f.b;
          }
          return true;
        }
        if (ch == '"') {
          if (f.b < uint32_t(n.min_count)) return false;
          child_done(0);
          return depth_ >= 0;
        }
        if (n.max_count >= 0 && f.b >= uint32_t(n.max_count)) return false;
        if (ch == '\\') {
          f.state = 1;
          return true;
        }
        if (ch < 0x20) return false;
        if (ch < 0x80) {
          if (counted) ++f.b;
          return true;
        }
        if (ch >= 0xC2 && ch <= 0xDF) {
          f.a = 1;
        } else if (ch >= 0xE0 && ch <= 0xEF) {
          f.a = 2;
          f.c = ch == 0xE0 ? 0xA0BF : ch == 0xED ? 0x809F : 0;
        } else if (ch >= 0xF0 && ch <= 0xF4) {
          f.a = 3;
          f.c = ch == 0xF0 ? 0x90BF : ch == 0xF4 ? 0x808F : 0;
        } else {
          return false;
        }
        return true;
      }
      case kNum: {
        // Digits are counted per part (integer, fraction, exponent) and capped, so a number
        // always ends; every capped part can still end or move on to the next part.
        auto digit = [&](uint8_t next, uint16_t cap) {
          if (f.a >= cap) return false;
          ++f.a;
          f.state = next;
          return true;
        };
        constexpr uint16_t kMaxDigits = 18, kMaxExpDigits = 3;
        switch (f.state) {
          case 0:
            if (ch == '-' && !n.non_negative) {
              f.state = 1;
              return true;
            }
            [[fallthrough]];
          case 1:
            if (ch == '0') return digit(2, kMaxDigits);
            if (is_digit(ch)) return digit(3, kMaxDigits);
            return false;
          case 2:
          case 3:
          case 5:
            if (f.state == 3 && is_digit(ch) && digit(3, kMaxDigits)) return true;
            if (f.state == 5 && is_digit(ch) && digit(5, kMaxDigits)) return true;
            if (!n.integer && ch == '.' && f.state != 5) {
              f.state = 4;
              f.a = 0;
              return true;
            }
            if (!n.integer && (ch == 'e' || ch == 'E')) {
              f.state = 6;
              f.a = 0;
              return true;
            }
            break;  // the number ends before this byte
          case 4:
            return is_digit(ch) && digit(5, kMaxDigits);
          case 6:
            if (ch == '+' || ch == '-') {
              f.state = 7;
              return true;
            }
            [[fallthrough]];
          case 7:
            return is_digit(ch) && digit(8, kMaxExpDigits);
          case 8:
            if (is_digit(ch) && digit(8, kMaxExpDigits)) return true;
            break;
        }
        child_done(0);  // ended by lookahead: the byte belongs to the parent
        if (depth_ < 0) return false;
        continue;
      }
      case kLit: {
        const uint32_t pos = lit_pos(f);
        uint32_t lo = f.b, hi = f.c;
        // An object's keys: only its properties from the next one up to the next required one.
        uint32_t tag_lo = 0, tag_hi = UINT32_MAX;
        if (n.object_keys) {
          const Frame& obj = frames_[size_t(depth_ - 2)];
          const GrammarNode& o = g_->node(obj.node);
          tag_lo = obj.b;
          tag_hi = o.next_required[obj.b];
        }
        auto allowed = [&](uint32_t i) {
          return n.lit_tags[i] >= tag_lo && n.lit_tags[i] <= tag_hi;
        };
        // [lo, hi) share their first `pos` bytes and are sorted: those that end there come
        // first, then ascending by the byte at `pos`; binary search for the run with `ch`.
        auto first_where = [](uint32_t a, uint32_t b, auto before) {
          while (a < b) {
            const uint32_t m = a + (b - a) / 2;
            before(m) ? a = m + 1 : b = m;
          }
          return a;
        };
        uint32_t nlo = first_where(lo, hi, [&](uint32_t i) {
          return n.lits[i].size() <= pos || uint8_t(n.lits[i][pos]) < ch;
        });
        const uint32_t nhi =
            first_where(nlo, hi, [&](uint32_t i) { return uint8_t(n.lits[i][pos]) <= ch; });
        while (nlo < nhi && !allowed(nlo)) ++nlo;
        if (nhi > nlo) {
          set_lit_pos(f, pos + 1);
          f.b = nlo;
          f.c = nhi;
          bool only = n.lits[nlo].size() == pos + 1;
          for (uint32_t k = nlo + 1; only && k < nhi; ++k) only = !allowed(k);
          if (only) {  // nothing longer: done now
            if (n.lit_next[nlo] != kNoNode) {
              f = Frame{kValue, 0, 0, n.lit_next[nlo], 0, 0};
            } else {
              child_done(n.lit_tags[nlo]);
              return depth_ >= 0;
            }
          }
          return true;
        }
        if (pos == 0 || n.lits[lo].size() != pos) return false;
        if (!finish_pending()) return false;
        continue;
      }
      case kSeq:
        return false;  // never on top: a part is always pushed above it
    }
    return false;
  }
}

// Ends the number or literal on top, which was waiting to see whether it goes on.
bool Machine::finish_pending() {
  Frame& f = frames_[size_t(depth_ - 1)];
  const GrammarNode& n = g_->node(f.node);
  if (f.kind == kNum) {
    if (f.state != 2 && f.state != 3 && f.state != 5 && f.state != 8) return false;
    child_done(0);
    return depth_ >= 0;
  }
  if (f.kind == kLit && lit_pos(f) > 0 && n.lits[f.b].size() == lit_pos(f)) {
    if (n.lit_next[f.b] != kNoNode) {
      f = Frame{kValue, 0, 0, n.lit_next[f.b], 0, 0};
    } else {
      child_done(n.lit_tags[f.b]);
    }
    return depth_ >= 0;
  }
  return false;
}

bool Machine::in_plain_string() const {
  if (depth_ <= 0) return false;
  const Frame& f = frames_[size_t(depth_ - 1)];
  if (f.kind != kStr || f.state != 0 || f.a != 0) return false;
  const GrammarNode& n = g_->node(f.node);
  return n.min_count == 0 && n.max_count < 0;
}

bool Machine::can_end() const {
  Machine m(*this);
  while (m.depth_ > 0) {
    if (!m.finish_pending()) return false;
  }
  return m.depth_ == 0;
}

}  // namespace ember::text
