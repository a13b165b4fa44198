// jinja::Value: the dynamic value of the chat-template interpreter, modelled on the Python
// objects Jinja2 sees when Hugging Face renders a chat template: undefined, None, bool, int,
// float, str, list, dict (insertion-ordered, string keys), namespace and callables (macros and
// builtins). Lists, dicts and namespaces are shared by reference, as in Python; strings are
// UTF-8 and measured in code points wherever Python would (len, slicing, indexing).
// Invariant: everything a template prints goes through to_str(), which follows Python's str().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ember::text::jinja {

// Thrown inside the interpreter only; Template::parse/render turn it into an ember::Error.
// `line` is 0 when unknown; the boundary adds "<name> line N: ".
struct TemplateError : std::runtime_error {
  TemplateError(int line_, const std::string& msg, bool raw_ = false)
      : std::runtime_error(msg), line(line_), raw(raw_) {}
  int line;
  bool raw;  // raise_exception(): the message is shown exactly as the template wrote it
};

class Value;
struct Dict;
using ValueList = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;

struct Callable {
  std::string name;
  std::function<Value(ValueList& args, KwArgs& kwargs, int line)> fn;
};

struct Undefined {
  std::string hint;  // what was looked up, for error messages
};
struct None {};
struct ListRef {
  std::shared_ptr<ValueList> p;
  bool tuple = false;  // a Python tuple: prints as (a, b), otherwise behaves as a list
};
struct DictRef {
  std::shared_ptr<Dict> p;
};
struct NamespaceRef {
  std::shared_ptr<Dict> p;
};
using CallableRef = std::shared_ptr<Callable>;

// A template can nest values as deep as its step budget allows (a loop that wraps a list in a
// list 100,000 times) or make a namespace hold itself. So lists and dicts are made here and
// freed through a queue, not recursively (freeing the outermost would recurse once a level),
// and every recursive walk over values (repr, tojson, ==, ordering) stops past this depth with
// an error naming it.
inline constexpr int kMaxValueDepth = 1000;
std::shared_ptr<ValueList> new_list(ValueList l);
std::shared_ptr<Dict> new_dict();
// One level deeper into a value for a recursive walk; throws TemplateError past kMaxValueDepth.
class ValueDepth {
 public:
  explicit ValueDepth(int line);
  ~ValueDepth();
  ValueDepth(const ValueDepth&) = delete;
  ValueDepth& operator=(const ValueDepth&) = delete;
};

class Value {
 public:
  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}                     // NOLINT
  Value(None) : v_(None{}) {}                                  // NOLINT
  Value(bool b) : v_(b) {}                                     // NOLINT
  Value(int64_t i) : v_(i) {}                                  // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}                // NOLINT
  Value(double d) : v_(d) {}                                   // NOLINT
  Value(std::string s) : v_(std::move(s)) {}                   // NOLINT
  Value(const char* s) : v_(std::string(s)) {}                 // NOLINT
  Value(ValueList l) : v_(ListRef{new_list(std::move(l))}) {}  // NOLINT
  Value(ListRef l) : v_(std::move(l)) {}                       // NOLINT
  Value(DictRef d) : v_(std::move(d)) {}                       // NOLINT
  Value(NamespaceRef n) : v_(std::move(n)) {}                  // NOLINT
  Value(CallableRef c) : v_(std::move(c)) {}                   // NOLINT

  static Value undefined(std::string hint = {}) { return Value(Undefined{std::move(hint)}); }
  static Value none() { return Value(None{}); }
  static Value dict();
  static Value tuple(ValueList l) { return Value(ListRef{new_list(std::move(l)), true}); }
  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<ListRef>(v_); }
  bool is_dict() const { return std::holds_alternative<DictRef>(v_); }
  bool is_namespace() const { return std::holds_alternative<NamespaceRef>(v_); }
  bool is_callable() const { return std::holds_alternative<CallableRef>(v_); }
  bool is_tuple() const { return is_list() && std::get<ListRef>(v_).tuple; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const;    // bool and int; a float saturates
  double as_double() const;  // any number
  const std::string& str() const { return std::get<std::string>(v_); }
  ValueList& list() const { return *std::get<ListRef>(v_).p; }
  Dict& dict_ref() const { return *std::get<DictRef>(v_).p; }
  Dict& ns() const { return *std::get<NamespaceRef>(v_).p; }
  const std::shared_ptr<Dict>& ns_ptr() const { return std::get<NamespaceRef>(v_).p; }
  const Callable& callable() const { return *std::get<CallableRef>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

  // Python's type name ("str", "list", "dict", "NoneType", ...), for error messages.
  std::string type_name() const;
  bool truthy() const;
  std::string to_str() const;  // Python str(); undefined gives ""
  std::string repr() const;    // Python repr()
  // json.dumps(value, ensure_ascii=False, indent=indent) (indent < 0: compact with ", " ": ").
  std::string to_json(int indent) const;
  nlohmann::ordered_json to_nlohmann() const;

 private:
  std::variant<Undefined, None, bool, int64_t, double, std::string, ListRef, DictRef, NamespaceRef,
               CallableRef>
      v_;
};

// An insertion-ordered string-keyed map (Python dict order is what templates iterate in).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

bool values_equal(const Value& a, const Value& b);
// Python ordering for sort/min/max/<: numbers, strings, lists. Throws TemplateError otherwise.
int compare_values(const Value& a, const Value& b, int line);

// UTF-8 helpers: code points are what Python indexes strings by.
std::u32string utf8_decode(std::string_view s);
std::string utf8_encode(std::u32string_view s);
bool py_isspace(char32_t c);
std::string py_float_repr(double d);

// d as an int64 when it has one (NaN and values past int64's range have none): casting those
// would be undefined behaviour.
std::optional<int64_t> int64_from_double(double d);

}  // namespace ember::text::jinja
