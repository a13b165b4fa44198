// Filters and tests, following Jinja2 3.x (jinja2/filters.py, jinja2/tests.py) and Hugging
// Face's tojson override.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "text/jinja/builtins.h"

namespace ember::text::jinja {

namespace {

// Positional-or-keyword argument lookup, as Python binds a filter's parameters.
struct Args {
  ValueList& pos;
  KwArgs& kw;
  const std::string& filter;
  int line;
  Value get(size_t i, const char* name, Value dflt = Value::none()) const {
    if (i < pos.size()) return pos[i];
    for (auto& [k, v] : kw) {
      if (k == name) return v;
    }
    return dflt;
  }
};

int64_t to_int(const Value& v, int64_t dflt) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  // Past int64 (Python would give a big int, which is not modelled) the default comes back.
  if (v.is_float()) return int64_from_double(v.as_double()).value_or(dflt);
  if (v.is_string()) {
    try {
      size_t n = 0;
      std::string s = py_strip(v.str(), Value::none(), true, true);
      int64_t r = std::stoll(s, &n, 10);
      if (n == s.size()) return r;
      double d = std::stod(s, &n);  // Jinja falls back to int(float(s))
      if (n == s.size()) return int64_from_double(d).value_or(dflt);
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

double to_float(const Value& v, double dflt) {
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    try {
      size_t n = 0;
      std::string s = py_strip(v.str(), Value::none(), true, true);
      double r = std::stod(s, &n);
      if (n == s.size()) return r;
    } catch (const std::exception&) {
    }
  }
  return dflt;
}

// Jinja's sort key: strings compare case-insensitively unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return (v.is_string() && !case_sensitive) ? Value(py_lower(v.str())) : v;
}

Value attr_path(const Value& v, const Value& attribute, int line) {
  if (attribute.is_int()) return py_getitem(v, attribute, line);
  Value cur = v;
  std::string path = attribute.to_str();
  size_t pos = 0;
  while (true) {  // "a.b" walks nested attributes, like Jinja's make_attrgetter
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? dot : dot - pos);
    if (cur.is_undefined()) return cur;
    cur = py_getitem(cur, Value(part), line);
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

std::string do_title(const std::string& s) {
  // Jinja: capitalise each word, words split on whitespace and -({[<
  std::string out;
  bool start = true;
  for (char c : s) {
    bool sep = std::isspace(static_cast<unsigned char>(c)) || c == '-' || c == '(' || c == '{' ||
               c == '[' || c == '<';
    if (sep) {
      out += c;
      start = true;
    } else {
      out += start ? py_upper(std::string(1, c)) : py_lower(std::string(1, c));
      start = false;
    }
  }
  return out;
}

ValueList select_items(const Args& a, const Value& v, bool with_attr, bool keep) {
  ValueList out;
  size_t test_at = with_attr ? 1 : 0;
  Value test = a.get(test_at, "__test__");
  ValueList test_args(a.pos.begin() + std::min(a.pos.size(), test_at + 1), a.pos.end());
  for (const Value& item : iterate(v, a.line)) {
    Value subject = with_attr ? attr_path(item, a.get(0, "attribute"), a.line) : item;
    bool r =
        test.is_none() ? subject.truthy() : apply_test(test.to_str(), subject, test_args, a.line);
    if (r == keep) out.push_back(item);
  }
  return out;
}

using FilterFn = std::function<Value(const Value&, Args&)>;

const std::map<std::string, FilterFn, std::less<>>& filters() {
  static const auto* table = new std::map<std::string, FilterFn, std::less<>>{
      {"trim", [](const Value& v,
                  Args& a) { return Value(py_strip(v.to_str(), a.get(0, "chars"), true, true)); }},
      {"upper", [](const Value& v, Args&) { return Value(py_upper(v.to_str())); }},
      {"lower", [](const Value& v, Args&) { return Value(py_lower(v.to_str())); }},
      {"capitalize",
       [](const Value& v, Args&) {
         std::string s = py_lower(v.to_str());
         if (!s.empty()) s[0] = py_upper(s.substr(0, 1))[0];
         return Value(s);
       }},
      {"title", [](const Value& v, Args&) { return Value(do_title(v.to_str())); }},
      {"length", [](const Value& v, Args& a) { return Value(py_len(v, a.line)); }},
      {"count", [](const Value& v, Args& a) { return Value(py_len(v, a.line)); }},
      {"first",
       [](const Value& v, Args& a) {
         ValueList l = iterate(v, a.line);
         return l.empty() ? Value::undefined("first") : l.front();
       }},
      {"last",
       [](const Value& v, Args& a) {
         ValueList l = iterate(v, a.line);
         return l.empty() ? Value::undefined("last") : l.back();
       }},
      {"join",
       [](const Value& v, Args& a) {
         std::string sep = a.get(0, "d", Value("")).to_str();
         Value attribute = a.get(1, "attribute");
         std::string out;
         ValueList items = iterate(v, a.line);
         for (size_t i = 0; i < items.size(); ++i) {
           Value x = attribute.is_none() ? items[i] : attr_path(items[i], attribute, a.line);
           out += (i ? sep : "") + x.to_str();
         }
         return Value(out);
       }},
      {"default",
       [](const Value& v, Args& a) {
         bool boolean = a.get(1, "boolean", Value(false)).truthy();
         if (v.is_undefined() || (boolean && !v.truthy()))
           return a.get(0, "default_value", Value(""));
         return v;
       }},
      {"replace",
       [](const Value& v, Args& a) {
         ValueList margs{a.get(0, "old"), a.get(1, "new")};
         Value count = a.get(2, "count");
         if (!count.is_none()) margs.push_back(count);
         KwArgs none;
         return *call_method(Value(v.to_str()), "replace", margs, none, a.line);
       }},
      {"tojson",
       [](const Value& v, Args& a) {
         Value indent = a.get(0, "indent");
         return Value(v.to_json(indent.is_none() ? -1 : static_cast<int>(indent.as_int())));
       }},
      {"string", [](const Value& v, Args&) { return Value(v.to_str()); }},
      {"safe", [](const Value& v, Args&) { return v; }},
      {"int", [](const Value& v,
                 Args& a) { return Value(to_int(v, to_int(a.get(0, "default", Value(0)), 0))); }},
      {"float",
       [](const Value& v, Args& a) {
         return Value(to_float(v, to_float(a.get(0, "default", Value(0.0)), 0.0)));
       }},
      {"abs",
       [](const Value& v, Args& a) {
         if (!v.is_number()) throw TemplateError(a.line, "abs: expected a number");
         return v.is_float() ? Value(std::fabs(v.as_double()))
                             : Value(static_cast<int64_t>(std::llabs(v.as_int())));
       }},
      {"round",
       [](const Value& v, Args& a) {
         if (!v.is_number()) throw TemplateError(a.line, "round: expected a number");
         int64_t precision = a.get(0, "precision", Value(0)).as_int();
         std::string method = a.get(1, "method", Value("common")).to_str();
         double scale = std::pow(10.0, static_cast<double>(precision));
         double x = v.as_double() * scale;
         double r = method == "ceil"    ? std::ceil(x)
                    : method == "floor" ? std::floor(x)
                                        : std::nearbyint(x);  // half-even, like Python's round
         if (method == "common" && v.is_int()) return Value(v.as_int());
         return Value(r / scale);
       }},
      {"list", [](const Value& v, Args& a) { return Value(iterate(v, a.line)); }},
      {"items",
       [](const Value& v, Args& a) {
         if (v.is_undefined()) return Value(ValueList{});
         if (!v.is_dict()) throw TemplateError(a.line, "items: expected a mapping");
         ValueList none;
         KwArgs nokw;
         return *call_method(v, "items", none, nokw, a.line);
       }},
      {"selectattr", [](const Value& v, Args& a) { return Value(select_items(a, v, true, true)); }},
      {"rejectattr",
       [](const Value& v, Args& a) { return Value(select_items(a, v, true, false)); }},
      {"select", [](const Value& v, Args& a) { return Value(select_items(a, v, false, true)); }},
      {"reject", [](const Value& v, Args& a) { return Value(select_items(a, v, false, false)); }},
      {"map",
       [](const Value& v, Args& a) {
         ValueList out;
         Value attribute;
         Value dflt = Value::undefined();
         for (auto& [k, x] : a.kw) {
           if (k == "attribute") attribute = x;
           if (k == "default") dflt = x;
         }
         for (const Value& item : iterate(v, a.line)) {
           if (!attribute.is_undefined()) {
             Value r = attr_path(item, attribute, a.line);
             out.push_back(r.is_undefined() ? dflt : r);
           } else {
             if (a.pos.empty())
               throw TemplateError(a.line, "map: expected a filter name or attribute=");
             ValueList rest(a.pos.begin() + 1, a.pos.end());
             KwArgs nokw;
             out.push_back(apply_filter(a.pos[0].to_str(), item, rest, nokw, a.line));
           }
         }
         return Value(out);
       }},
      {"indent",
       [](const Value& v, Args& a) {
         Value w = a.get(0, "width", Value(4));
         std::string ind =
             w.is_string() ? w.str() : std::string(static_cast<size_t>(w.as_int()), ' ');
         bool first = a.get(1, "first", Value(false)).truthy();
         bool blank = a.get(2, "blank", Value(false)).truthy();
         std::string s = v.to_str() + "\n";
         std::vector<std::string> lines;
         size_t pos = 0;
         while (pos < s.size()) {
           size_t e = s.find('\n', pos);
           lines.push_back(s.substr(pos, e - pos));
           pos = e + 1;
         }
         std::string rv = lines.empty() ? "" : lines[0];
         for (size_t i = 1; i < lines.size(); ++i) {
           rv += "\n" + ((blank || !lines[i].empty()) ? ind + lines[i] : lines[i]);
         }
         return Value(first ? ind + rv : rv);
       }},
      {"unique",
       [](const Value& v, Args& a) {
         bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
         Value attribute = a.get(1, "attribute");
         ValueList out, seen;
         for (const Value& item : iterate(v, a.line)) {
           Value k = sort_key(attribute.is_none() ? item : attr_path(item, attribute, a.line), cs);
           bool dup = false;
           for (const Value& s : seen) dup |= values_equal(s, k);
           if (!dup) seen.push_back(k), out.push_back(item);
         }
         return Value(out);
       }},
      {"reverse",
       [](const Value& v, Args& a) {
         if (v.is_string()) {
           std::u32string u = utf8_decode(v.str());
           std::reverse(u.begin(), u.end());
           return Value(utf8_encode(u));
         }
         ValueList l = iterate(v, a.line);
         std::reverse(l.begin(), l.end());
         return Value(l);
       }},
      {"sort",
       [](const Value& v, Args& a) {
         bool reverse = a.get(0, "reverse", Value(false)).truthy();
         bool cs = a.get(1, "case_sensitive", Value(false)).truthy();
         Value attribute = a.get(2, "attribute");
         ValueList l = iterate(v, a.line);
         auto key = [&](const Value& x) {
           return sort_key(attribute.is_none() ? x : attr_path(x, attribute, a.line), cs);
         };
         std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
           int c = compare_values(key(x), key(y), a.line);
           return reverse ? c > 0 : c < 0;
         });
         return Value(l);
       }},
      {"dictsort",
       [](const Value& v, Args& a) {
         if (!v.is_dict()) throw TemplateError(a.line, "dictsort: expected a mapping");
         bool cs = a.get(0, "case_sensitive", Value(false)).truthy();
         bool by_value = a.get(1, "by", Value("key")).to_str() == "value";
         bool reverse = a.get(2, "reverse", Value(false)).truthy();
         ValueList l;
         for (const auto& [k, x] : v.dict_ref().items)
           l.push_back(Value::tuple(ValueList{Value(k), x}));
         std::stable_sort(l.begin(), l.end(), [&](const Value& x, const Value& y) {
           size_t i = by_value ? 1 : 0;
           int c = compare_values(sort_key(x.list()[i], cs), sort_key(y.list()[i], cs), a.line);
           return reverse ? c > 0 : c < 0;
         });
         return Value(l);
       }},
      {"batch",
       [](const Value& v, Args& a) {
         int64_t n = a.get(0, "linecount").as_int();
         if (n <= 0) throw TemplateError(a.line, "batch: linecount must be positive");
         Value fill = a.get(1, "fill_with");
         ValueList out, cur;
         for (const Value& item : iterate(v, a.line)) {
           cur.push_back(item);
           if (static_cast<int64_t>(cur.size()) == n) out.emplace_back(std::move(cur)), cur.clear();
         }
         if (!cur.empty()) {
           if (!fill.is_none()) {
             while (static_cast<int64_t>(cur.size()) < n) cur.push_back(fill);
           }
           out.emplace_back(std::move(cur));
         }
         return Value(out);
       }},
      {"sum",
       [](const Value& v, Args& a) {
         Value attribute = a.get(0, "attribute");
         Value total = a.get(1, "start", Value(0));
         for (const Value& item : iterate(v, a.line)) {
           Value x = attribute.is_none() ? item : attr_path(item, attribute, a.line);
           if (!x.is_number() || !total.is_number())
             throw TemplateError(a.line, "sum: expected numbers");
           total = (x.is_float() || total.is_float()) ? Value(total.as_double() + x.as_double())
                                                      : Value(total.as_int() + x.as_int());
         }
         return total;
       }},
      {"min",
       [](const Value& v, Args& a) {
         ValueList l = iterate(v, a.line);
         if (l.empty()) return Value::undefined("min");
         return *std::min_element(l.begin(), l.end(), [&](const Value& x, const Value& y) {
           return compare_values(sort_key(x, false), sort_key(y, false), a.line) < 0;
         });
       }},
      {"max",
       [](const Value& v, Args& a) {
         ValueList l = iterate(v, a.line);
         if (l.empty()) return Value::undefined("max");
         return *std::max_element(l.begin(), l.end(), [&](const Value& x, const Value& y) {
           return compare_values(sort_key(x, false), sort_key(y, false), a.line) < 0;
         });
       }},
  };
  return *table;
}

const std::map<std::string, std::string, std::less<>>& filter_aliases() {
  static const auto* m = new std::map<std::string, std::string, std::less<>>{{"d", "default"}};
  return *m;
}

using TestFn = std::function<bool(const Value&, const ValueList&, int)>;

const std::map<std::string, TestFn, std::less<>>& tests() {
  auto need = [](const ValueList& a, int line, const char* name) -> const Value& {
    if (a.empty()) throw TemplateError(line, fmt::format("test '{}' needs an argument", name));
    return a[0];
  };
  static const auto* table = new std::map<std::string, TestFn, std::less<>>{
      {"defined", [](const Value& v, const ValueList&, int) { return !v.is_undefined(); }},
      {"undefined", [](const Value& v, const ValueList&, int) { return v.is_undefined(); }},
      {"none", [](const Value& v, const ValueList&, int) { return v.is_none(); }},
      {"string", [](const Value& v, const ValueList&, int) { return v.is_string(); }},
      {"mapping", [](const Value& v, const ValueList&, int) { return v.is_dict(); }},
      {"iterable",
       [](const Value& v, const ValueList&, int) {
         return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
       }},
      {"sequence", [](const Value& v, const ValueList&,
                      int) { return v.is_list() || v.is_dict() || v.is_string(); }},
      {"number", [](const Value& v, const ValueList&, int) { return v.is_number(); }},
      {"integer", [](const Value& v, const ValueList&, int) { return v.is_int(); }},
      {"float", [](const Value& v, const ValueList&, int) { return v.is_float(); }},
      {"boolean", [](const Value& v, const ValueList&, int) { return v.is_bool(); }},
      {"true", [](const Value& v, const ValueList&, int) { return v.is_bool() && v.as_bool(); }},
      {"false", [](const Value& v, const ValueList&, int) { return v.is_bool() && !v.as_bool(); }},
      {"callable", [](const Value& v, const ValueList&, int) { return v.is_callable(); }},
      {"even",
       [](const Value& v, const ValueList&, int line) {
         if (!v.is_int() && !v.is_bool()) throw TemplateError(line, "test 'even' needs an integer");
         return v.as_int() % 2 == 0;
       }},
      {"odd",
       [](const Value& v, const ValueList&, int line) {
         if (!v.is_int() && !v.is_bool()) throw TemplateError(line, "test 'odd' needs an integer");
         return v.as_int() % 2 != 0;
       }},
      {"divisibleby",
       [need](const Value& v, const ValueList& a, int line) {
         int64_t d = need(a, line, "divisibleby").as_int();
         if (d == 0) throw TemplateError(line, "divisibleby 0");
         return v.as_int() % d == 0;
       }},
      {"equalto", [need](const Value& v, const ValueList& a,
                         int line) { return values_equal(v, need(a, line, "equalto")); }},
      {"eq", [need](const Value& v, const ValueList& a,
                    int line) { return values_equal(v, need(a, line, "eq")); }},
      {"ne", [need](const Value& v, const ValueList& a,
                    int line) { return !values_equal(v, need(a, line, "ne")); }},
      {"sameas",
       [need](const Value& v, const ValueList& a, int line) {
         // Python `is`: 1 is not True, though 1 == True
         const Value& o = need(a, line, "sameas");
         return v.type_name() == o.type_name() && values_equal(v, o);
       }},
      {"lt", [need](const Value& v, const ValueList& a,
                    int line) { return compare_values(v, need(a, line, "lt"), line) < 0; }},
      {"le", [need](const Value& v, const ValueList& a,
                    int line) { return compare_values(v, need(a, line, "le"), line) <= 0; }},
      {"gt", [need](const Value& v, const ValueList& a,
                    int line) { return compare_values(v, need(a, line, "gt"), line) > 0; }},
      {"ge", [need](const Value& v, const ValueList& a,
                    int line) { return compare_values(v, need(a, line, "ge"), line) >= 0; }},
      {"in", [need](const Value& v, const ValueList& a,
                    int line) { return py_contains(need(a, line, "in"), v, line); }},
      {"lower", [](const Value& v, const ValueList&,
                   int) { return v.is_string() && py_lower(v.str()) == v.str(); }},
      {"upper", [](const Value& v, const ValueList&,
                   int) { return v.is_string() && py_upper(v.str()) == v.str(); }},
  };
  return *table;
}

const std::map<std::string, std::string, std::less<>>& test_aliases() {
  static const auto* m = new std::map<std::string, std::string, std::less<>>{
      {"==", "equalto"}, {"!=", "ne"}, {"<", "lt"},           {"<=", "le"},
      {">", "gt"},       {">=", "ge"}, {"greaterthan", "gt"}, {"lessthan", "lt"}};
  return *m;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filters().count(name) > 0 || filter_aliases().count(name) > 0;
}

bool is_known_test(std::string_view name) {
  return tests().count(name) > 0 || test_aliases().count(name) > 0;
}

Value apply_filter(const std::string& name, const Value& v, ValueList& args, KwArgs& kwargs,
                   int line) {
  auto alias = filter_aliases().find(name);
  const std::string& real = alias == filter_aliases().end() ? name : alias->second;
  auto it = filters().find(real);
  if (it == filters().end())
    throw TemplateError(line, fmt::format("unsupported filter '{}'", name));
  Args a{args, kwargs, real, line};
  return it->second(v, a);
}

bool apply_test(const std::string& name, const Value& v, ValueList& args, int line) {
  auto alias = test_aliases().find(name);
  const std::string& real = alias == test_aliases().end() ? name : alias->second;
  auto it = tests().find(real);
  if (it == tests().end()) throw TemplateError(line, fmt::format("unsupported test '{}'", name));
  return it->second(v, args, line);
}

}  // namespace ember::text::jinja
