// Python-object behaviour the templates lean on: item/attribute access, `in`, iteration, len,
// string and dict methods, and the global functions.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "text/jinja/builtins.h"

namespace ember::text::jinja {

namespace {

const std::string& arg_str(const ValueList& args, size_t i, const char* what, int line) {
  if (i >= args.size() || !args[i].is_string()) {
    throw TemplateError(line, fmt::format("{}: argument {} must be a string", what, i + 1));
  }
  return args[i].str();
}

int64_t normalize_index(int64_t i, int64_t n) {
  return i < 0 ? i + n : i;
}

std::vector<std::string> py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep.is_none() || sep.is_undefined()) {  // runs of whitespace; no empty strings
    std::u32string u = utf8_decode(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::u32string rest = u.substr(i);
        while (!rest.empty() && py_isspace(rest.back())) rest.pop_back();
        out.push_back(utf8_encode(rest));
        return out;
      }
      size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      out.push_back(utf8_encode(u.substr(i, j - i)));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.str();
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  out.push_back(s.substr(pos));
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    std::u32string u = utf8_decode(s);
    int64_t done = 0;
    for (char32_t c : u) {
      if (count < 0 || done < count) out += to, ++done;
      out += utf8_encode(std::u32string(1, c));
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + to;
    pos = f + from.size();
    ++done;
  }
  return out + s.substr(pos);
}

// str.format with {} / {0} / {name} fields and {{ }} escapes; format specs are not supported.
std::string py_format(const std::string& f, const ValueList& args, const KwArgs& kwargs, int line) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '{') {
      size_t e = f.find('}', i);
      if (e == std::string::npos) throw TemplateError(line, "format: unmatched '{'");
      std::string field = f.substr(i + 1, e - i - 1);
      if (field.find_first_of(":!") != std::string::npos) {
        throw TemplateError(line, "format: format specs and conversions are not supported");
      }
      const Value* v = nullptr;
      if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
        size_t idx = field.empty() ? auto_idx++ : std::stoul(field);
        if (idx < args.size()) v = &args[idx];
      } else {
        for (const auto& [k, kv] : kwargs) {
          if (k == field) v = &kv;
        }
      }
      if (!v) throw TemplateError(line, fmt::format("format: no argument for '{{{}}}'", field));
      out += v->to_str();
      i = e;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set;
  bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = utf8_decode(chars.to_str());
  auto strip_it = [&](char32_t c) {
    return ws ? py_isspace(c) : set.find(c) != std::u32string::npos;
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return utf8_encode(u.substr(b, e - b));
}

// ASCII case mapping: the templates upper/lower role names and keywords, not prose.
std::string py_upper(const std::string& s) {
  std::string r = s;
  for (char& c : r) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
  return r;
}

std::string py_lower(const std::string& s) {
  std::string r = s;
  for (char& c : r) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
  return r;
}

ValueList iterate(const Value& v, int line) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.list();
  if (v.is_dict()) {
    ValueList keys;
    for (const auto& kv : v.dict_ref().items) keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    ValueList chars;
    for (char32_t c : utf8_decode(v.str())) chars.emplace_back(utf8_encode(std::u32string(1, c)));
    return chars;
  }
  throw TemplateError(line, fmt::format("'{}' object is not iterable", v.type_name()));
}

int64_t py_len(const Value& v, int line) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(utf8_decode(v.str()).size());
  if (v.is_list()) return static_cast<int64_t>(v.list().size());
  if (v.is_dict()) return static_cast<int64_t>(v.dict_ref().items.size());
  throw TemplateError(line, fmt::format("object of type '{}' has no len()", v.type_name()));
}

Value py_getitem(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) {
    throw TemplateError(line, fmt::format("'{}' is undefined", obj.undefined_hint()));
  }
  if (obj.is_dict() || obj.is_namespace()) {
    if (!key.is_string()) return Value::undefined(key.to_str());
    const Dict& d = obj.is_dict() ? obj.dict_ref() : obj.ns();
    const Value* v = d.find(key.str());
    return v ? *v : Value::undefined(key.str());
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.list().size());
      int64_t i = normalize_index(key.as_int(), n);
      if (i < 0 || i >= n) return Value::undefined(fmt::format("index {}", key.as_int()));
      return obj.list()[static_cast<size_t>(i)];
    }
    std::u32string u = utf8_decode(obj.str());
    int64_t n = static_cast<int64_t>(u.size());
    int64_t i = normalize_index(key.as_int(), n);
    if (i < 0 || i >= n) return Value::undefined(fmt::format("index {}", key.as_int()));
    return Value(utf8_encode(u.substr(static_cast<size_t>(i), 1)));
  }
  if (key.is_string()) return py_getattr(obj, key.str(), line);
  return Value::undefined(key.to_str());
}

Value py_getattr(const Value& obj, const std::string& name, int line) {
  if (obj.is_undefined()) {
    throw TemplateError(
        line, fmt::format("'{}' is undefined (looking up '.{}')", obj.undefined_hint(), name));
  }
  if (obj.is_dict() || obj.is_namespace()) {
    const Dict& d = obj.is_dict() ? obj.dict_ref() : obj.ns();
    const Value* v = d.find(name);
    if (v) return *v;
  }
  return Value::undefined(name);
}

bool py_contains(const Value& container, const Value& item, int line) {
  if (container.is_string()) {
    if (!item.is_string()) {
      throw TemplateError(line, fmt::format("'in <string>' requires string as left operand, not "
                                            "{}",
                                            item.type_name()));
    }
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const Value& v : container.list()) {
      if (values_equal(v, item)) return true;
    }
    return false;
  }
  if (container.is_dict()) {
    return item.is_string() && container.dict_ref().find(item.str()) != nullptr;
  }
  if (container.is_undefined()) return false;
  throw TemplateError(line,
                      fmt::format("argument of type '{}' is not iterable", container.type_name()));
}

bool is_known_method(std::string_view name) {
  static const std::set<std::string, std::less<>> kMethods = {
      "strip", "lstrip", "rstrip", "split",      "rsplit",  "startswith", "endswith",
      "upper", "lower",  "title",  "capitalize", "replace", "format",     "find",
      "rfind", "count",  "join",   "splitlines", "isdigit", "isalpha",    "isspace",
      "get",   "items",  "keys",   "values"};
  return kMethods.count(name) > 0;
}

std::optional<Value> call_method(const Value& obj, const std::string& name, ValueList& args,
                                 KwArgs& kwargs, int line) {
  auto arg = [&](size_t i, const char* kw) -> Value {
    if (i < args.size()) return args[i];
    for (auto& [k, v] : kwargs) {
      if (k == kw) return v;
    }
    return Value::none();
  };
  if (obj.is_string()) {
    const std::string& s = obj.str();
    if (name == "strip") return Value(py_strip(s, arg(0, "chars"), true, true));
    if (name == "lstrip") return Value(py_strip(s, arg(0, "chars"), true, false));
    if (name == "rstrip") return Value(py_strip(s, arg(0, "chars"), false, true));
    if (name == "upper") return Value(py_upper(s));
    if (name == "lower") return Value(py_lower(s));
    if (name == "split" || name == "rsplit") {
      Value sep = arg(0, "sep");
      Value maxv = arg(1, "maxsplit");
      int64_t maxsplit = maxv.is_none() ? -1 : maxv.as_int();
      if (name == "rsplit" && maxsplit >= 0) {
        throw TemplateError(line, "rsplit with maxsplit is not supported");
      }
      if (!sep.is_none() && (!sep.is_string() || sep.str().empty())) {
        throw TemplateError(line, "split: separator must be a non-empty string");
      }
      ValueList parts;
      for (auto& p : py_split(s, sep, maxsplit)) parts.emplace_back(std::move(p));
      return Value(std::move(parts));
    }
    if (name == "splitlines") {
      ValueList parts;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t e = s.find('\n', pos);
        if (e == std::string::npos) e = s.size();
        std::string line_s = s.substr(pos, e - pos);
        if (!line_s.empty() && line_s.back() == '\r') line_s.pop_back();
        parts.emplace_back(std::move(line_s));
        pos = e + 1;
      }
      return Value(std::move(parts));
    }
    if (name == "startswith" || name == "endswith") {
      Value p = arg(0, "prefix");
      ValueList options = p.is_list() ? p.list() : ValueList{p};
      for (const Value& o : options) {
        if (!o.is_string()) throw TemplateError(line, fmt::format("{}: expected a string", name));
        const std::string& t = o.str();
        bool hit = name == "startswith"
                       ? s.rfind(t, 0) == 0
                       : s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
        if (hit) return Value(true);
      }
      return Value(false);
    }
    if (name == "title" || name == "capitalize") {
      ValueList a;
      KwArgs k;
      return apply_filter(name, obj, a, k, line);
    }
    if (name == "replace") {
      Value count = arg(2, "count");
      return Value(py_replace(s, arg_str(args, 0, "replace", line),
                              arg_str(args, 1, "replace", line),
                              count.is_none() ? -1 : count.as_int()));
    }
    if (name == "format") return Value(py_format(s, args, kwargs, line));
    if (name == "find" || name == "rfind" || name == "count") {
      const std::string& t = arg_str(args, 0, name.c_str(), line);
      if (name == "count") {
        if (t.empty()) return Value(py_len(obj, line) + 1);
        int64_t n = 0;
        for (size_t p = s.find(t); p != std::string::npos; p = s.find(t, p + t.size())) ++n;
        return Value(n);
      }
      size_t p = name == "find" ? s.find(t) : s.rfind(t);
      if (p == std::string::npos) return Value(int64_t{-1});
      return Value(static_cast<int64_t>(utf8_decode(s.substr(0, p)).size()));
    }
    if (name == "join") {
      std::string out;
      ValueList items = iterate(arg(0, "iterable"), line);
      for (size_t i = 0; i < items.size(); ++i) out += (i ? s : "") + items[i].to_str();
      return Value(std::move(out));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isspace") {
      if (s.empty()) return Value(false);
      for (char32_t c : utf8_decode(s)) {
        bool ok = name == "isdigit"   ? (c >= '0' && c <= '9')
                  : name == "isspace" ? py_isspace(c)
                                      : ((c | 32) >= 'a' && (c | 32) <= 'z') || c > 0x7F;
        if (!ok) return Value(false);
      }
      return Value(true);
    }
    return std::nullopt;
  }
  if (obj.is_dict()) {
    const Dict& d = obj.dict_ref();
    if (name == "get") {
      Value k = arg(0, "key");
      const Value* v = k.is_string() ? d.find(k.str()) : nullptr;
      return v ? *v : arg(1, "default");
    }
    if (name == "items" || name == "keys" || name == "values") {
      ValueList out;
      for (const auto& [k, v] : d.items) {
        if (name == "items") {
          out.push_back(Value::tuple(ValueList{Value(k), v}));
        } else {
          out.push_back(name == "keys" ? Value(k) : v);
        }
      }
      return Value(std::move(out));
    }
    return std::nullopt;
  }
  return std::nullopt;
}

bool is_known_global(std::string_view name) {
  return name == "range" || name == "namespace" || name == "dict" || name == "raise_exception" ||
         name == "strftime_now";
}

KwArgs make_globals(const std::tm& now) {
  KwArgs g;
  auto def = [&](const char* name, std::function<Value(ValueList&, KwArgs&, int)> fn) {
    auto c = std::make_shared<Callable>();
    c->name = name;
    c->fn = std::move(fn);
    g.emplace_back(name, Value(CallableRef(c)));
  };
  def("range", [](ValueList& a, KwArgs&, int line) {
    for (const Value& v : a) {
      if (!v.is_int() && !v.is_bool())
        throw TemplateError(line, "range: arguments must be integers");
    }
    if (a.empty() || a.size() > 3) throw TemplateError(line, "range expects 1 to 3 arguments");
    int64_t start = a.size() == 1 ? 0 : a[0].as_int();
    int64_t stop = a.size() == 1 ? a[0].as_int() : a[1].as_int();
    int64_t step = a.size() == 3 ? a[2].as_int() : 1;
    if (step == 0) throw TemplateError(line, "range: step must not be zero");
    ValueList out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= 1'000'000) throw TemplateError(line, "range: too many items");
      out.emplace_back(i);
    }
    return Value(std::move(out));
  });
  auto make_mapping = [](bool ns) {
    return [ns](ValueList& a, KwArgs& kw, int line) {
      auto d = new_dict();
      for (const Value& v : a) {
        if (!v.is_dict())
          throw TemplateError(line, "namespace/dict: positional argument must be a dict");
        for (const auto& [k, x] : v.dict_ref().items) d->set(k, x);
      }
      for (auto& [k, v] : kw) d->set(k, v);
      return ns ? Value(NamespaceRef{d}) : Value(DictRef{d});
    };
  };
  def("namespace", make_mapping(true));
  def("dict", make_mapping(false));
  def("raise_exception", [](ValueList& a, KwArgs&, int line) -> Value {
    throw TemplateError(line, a.empty() ? std::string("raise_exception") : a[0].to_str(), true);
  });
  def("strftime_now", [now](ValueList& a, KwArgs&, int line) {
    if (a.size() != 1 || !a[0].is_string()) {
      throw TemplateError(line, "strftime_now expects one format string");
    }
    char buf[256];
    size_t n = std::strftime(buf, sizeof buf, a[0].str().c_str(), &now);
    return Value(std::string(buf, n));
  });
  return g;
}

}  // namespace ember::text::jinja
