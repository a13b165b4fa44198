#include "text/jinja/value.h"
#include "text/unicode.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

namespace ember::text::jinja {

namespace {

// Lists and dicts whose last reference went while another was being freed wait here: freeing
// a nested value takes a loop, not a recursion per level.
// A thread's graveyard is destroyed at its exit, before the program's static objects: a static
// value freed after it (a template or value held in a static) is deleted directly, recursing,
// instead of being queued into freed vectors. `graveyard_gone` has no destructor, so it is
// readable for as long as the thread is.
thread_local bool graveyard_gone = false;
struct Graveyard {
  std::vector<ValueList*> lists;
  std::vector<Dict*> dicts;
  bool draining = false;
  ~Graveyard() { graveyard_gone = true; }
};
thread_local Graveyard graveyard;
thread_local int walk_depth = 0;

void drain() {
  if (graveyard.draining) return;  // the loop below, further up this stack, frees it
  graveyard.draining = true;
  while (!graveyard.lists.empty() || !graveyard.dicts.empty()) {
    if (!graveyard.lists.empty()) {
      ValueList* l = graveyard.lists.back();
      graveyard.lists.pop_back();
      delete l;
    } else {
      Dict* d = graveyard.dicts.back();
      graveyard.dicts.pop_back();
      delete d;
    }
  }
  graveyard.draining = false;
}

}  // namespace

std::shared_ptr<ValueList> new_list(ValueList l) {
  return {new ValueList(std::move(l)), [](ValueList* p) {
            if (graveyard_gone) return delete p;
            graveyard.lists.push_back(p);
            drain();
          }};
}

std::shared_ptr<Dict> new_dict() {
  return {new Dict(), [](Dict* p) {
            if (graveyard_gone) return delete p;
            graveyard.dicts.push_back(p);
            drain();
          }};
}

ValueDepth::ValueDepth(int line) {
  if (walk_depth >= kMaxValueDepth) {
    throw TemplateError(line, fmt::format("a value nests deeper than {} levels (limit {}), or "
                                          "holds itself",
                                          kMaxValueDepth, kMaxValueDepth));
  }
  ++walk_depth;
}

ValueDepth::~ValueDepth() {
  --walk_depth;
}

Value Value::dict() {
  return Value(DictRef{new_dict()});
}

namespace {
template <typename J>
Value from_json_impl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList l;
      for (const auto& e : j) l.push_back(from_json_impl(e));
      return Value(std::move(l));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict_ref().set(it.key(), from_json_impl(*it));
      return d;
    }
    default:
      return Value::undefined();
  }
}
}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) {
  return from_json_impl(j);
}
Value Value::from_json(const nlohmann::json& j) {
  return from_json_impl(j);
}

std::optional<int64_t> int64_from_double(double d) {
  constexpr double kTwo63 = 9223372036854775808.0;  // 2^63, exact in a double
  if (!(d >= -kTwo63 && d < kTwo63)) return std::nullopt;
  return static_cast<int64_t>(d);
}

int64_t Value::as_int() const {
  if (is_bool()) return as_bool() ? 1 : 0;
  if (is_float()) {
    const double d = std::get<double>(v_);
    if (auto i = int64_from_double(d)) return *i;
    if (std::isnan(d)) return 0;
    return d < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
  }
  return std::get<int64_t>(v_);
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(v_);
  return static_cast<double>(as_int());
}

std::string Value::type_name() const {
  switch (v_.index()) {
    case 0:
      return "undefined";
    case 1:
      return "NoneType";
    case 2:
      return "bool";
    case 3:
      return "int";
    case 4:
      return "float";
    case 5:
      return "str";
    case 6:
      return "list";
    case 7:
      return "dict";
    case 8:
      return "Namespace";
    default:
      return "function";
  }
}

bool Value::truthy() const {
  switch (v_.index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return as_bool();
    case 3:
      return as_int() != 0;
    case 4:
      return as_double() != 0.0;
    case 5:
      return !str().empty();
    case 6:
      return !list().empty();
    case 7:
      return !dict_ref().items.empty();
    default:
      return true;
  }
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Python's repr: shortest round-trip digits, exponent form outside [1e-4, 1e16).
  double a = std::fabs(d);
  std::string s;
  if (a != 0.0 && (a < 1e-4 || a >= 1e16)) {
    std::string shortest = fmt::format("{}", d);
    if (shortest.find('e') != std::string::npos) {
      s = shortest;
      // Python writes 1e+16 and 1e-05 (at least two exponent digits).
      auto e = s.find('e');
      std::string mant = s.substr(0, e), ex = s.substr(e + 1);
      char sign = '+';
      if (!ex.empty() && (ex[0] == '-' || ex[0] == '+')) sign = ex[0], ex = ex.substr(1);
      if (ex.size() < 2) ex = "0" + ex;
      return mant + "e" + sign + ex;
    }
    return shortest;
  }
  s = fmt::format("{}", d);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string Value::to_str() const {
  switch (v_.index()) {
    case 0:
      return "";
    case 1:
      return "None";
    case 2:
      return as_bool() ? "True" : "False";
    case 3:
      return std::to_string(as_int());
    case 4:
      return py_float_repr(as_double());
    case 5:
      return str();
    default:
      return repr();
  }
}

namespace {
std::string py_str_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == static_cast<unsigned char>(q)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += q;
  return out;
}

void json_escape(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void to_json_impl(const Value& v, int indent, int depth, std::string& out) {
  ValueDepth guard(0);
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  if (v.is_undefined()) throw TemplateError(0, "tojson: value is undefined");
  if (v.is_none()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    double d = v.as_double();
    out += std::isnan(d)   ? "NaN"
           : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity")
                           : py_float_repr(d);
  } else if (v.is_string()) {
    json_escape(out, v.str());
  } else if (v.is_list()) {
    const auto& l = v.list();
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      if (i) out += indent >= 0 ? "," : ", ";
      if (indent >= 0) newline(depth + 1);
      to_json_impl(l[i], indent, depth + 1, out);
    }
    if (indent >= 0) newline(depth);
    out += ']';
  } else if (v.is_dict() || v.is_namespace()) {
    const auto& items = v.is_dict() ? v.dict_ref().items : v.ns().items;
    if (items.empty()) {
      out += "{}";
      return;
    }
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += indent >= 0 ? "," : ", ";
      if (indent >= 0) newline(depth + 1);
      json_escape(out, items[i].first);
      out += ": ";
      to_json_impl(items[i].second, indent, depth + 1, out);
    }
    if (indent >= 0) newline(depth);
    out += '}';
  } else {
    throw TemplateError(0, fmt::format("tojson: a {} is not JSON serializable", v.type_name()));
  }
}
}  // namespace

std::string Value::repr() const {
  ValueDepth guard(0);
  switch (v_.index()) {
    case 0:
      return "Undefined";
    case 5:
      return py_str_repr(str());
    case 6: {
      std::string out = is_tuple() ? "(" : "[";
      const auto& l = list();
      for (size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + l[i].repr();
      if (is_tuple()) return out + (l.size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case 7:
    case 8: {
      const auto& items = is_dict() ? dict_ref().items : ns().items;
      std::string out = is_dict() ? "{" : "<Namespace {";
      for (size_t i = 0; i < items.size(); ++i) {
        out += (i ? ", " : "") + py_str_repr(items[i].first) + ": " + items[i].second.repr();
      }
      return out + (is_dict() ? "}" : "}>");
    }
    case 9:
      return "<function " + callable().name + ">";
    default:
      return to_str();
  }
}

std::string Value::to_json(int indent) const {
  std::string out;
  to_json_impl(*this, indent, 0, out);
  return out;
}

nlohmann::ordered_json Value::to_nlohmann() const {
  return nlohmann::ordered_json::parse(to_json(-1));
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  if (Value* existing = find(key)) {
    *existing = std::move(v);
  } else {
    items.emplace_back(key, std::move(v));
  }
}

bool values_equal(const Value& a, const Value& b) {
  ValueDepth guard(0);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() == b.str();
  if (a.is_none() && b.is_none()) return true;
  if (a.is_undefined() && b.is_undefined()) return true;
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!values_equal(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const auto &x = a.dict_ref().items, &y = b.dict_ref().items;
    if (x.size() != y.size()) return false;
    for (const auto& [k, v] : x) {
      const Value* o = b.dict_ref().find(k);
      if (!o || !values_equal(v, *o)) return false;
    }
    return true;
  }
  if (a.is_namespace() && b.is_namespace()) return &a.ns() == &b.ns();
  return false;
}

int compare_values(const Value& a, const Value& b, int line) {
  ValueDepth guard(line);
  if (a.is_number() && b.is_number()) {
    double x = a.as_double(), y = b.as_double();
    if (!a.is_float() && !b.is_float()) {
      return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int() ? 1 : 0;
    }
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.str().compare(b.str());  // byte order of UTF-8 is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto &x = a.list(), &y = b.list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      int c = compare_values(x[i], y[i], line);
      if (c) return c;
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  throw TemplateError(line,
                      fmt::format("cannot compare '{}' with '{}'", a.type_name(), b.type_name()));
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) {  // invalid byte: keep it as its own code point
      out += static_cast<char32_t>(0xDC00 + c);
      ++i;
      continue;
    }
    char32_t cp = n == 1 ? c : (c & (0x7F >> n));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out += cp;
    i += static_cast<size_t>(n);
  }
  return out;
}

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {  // a byte that was not valid UTF-8 goes back as is
      out += static_cast<char>(cp - 0xDC00);
    } else {
      append_utf8(out, static_cast<uint32_t>(cp));
    }
  }
  return out;
}

bool py_isspace(char32_t c) {
  // Python's str.isspace(): what strip()/trim/split() remove.
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace ember::text::jinja
