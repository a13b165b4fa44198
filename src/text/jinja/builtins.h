// jinja builtins: the filters, tests, methods and global functions chat templates use, with
// Jinja2/Python semantics (e.g. `trim` strips Unicode whitespace, `tojson` is Hugging Face's
// json.dumps(ensure_ascii=False), `sort` is case-insensitive by default).
// The is_known_* predicates are what the parser validates names against, so an unsupported
// construct is a load-time error rather than a wrong prompt.
// Hugging Face renders in an ImmutableSandboxedEnvironment, so methods that mutate (list.append,
// dict.update, ...) are deliberately absent.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace ember::text::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
bool is_known_method(std::string_view name);
bool is_known_global(std::string_view name);

Value apply_filter(const std::string& name, const Value& v, ValueList& args, KwArgs& kwargs,
                   int line);
bool apply_test(const std::string& name, const Value& v, ValueList& args, int line);
// A method call obj.name(args): nullopt when obj's type has no such method.
std::optional<Value> call_method(const Value& obj, const std::string& name, ValueList& args,
                                 KwArgs& kwargs, int line);

// range, namespace, dict, raise_exception, strftime_now (which formats `now`, not the clock,
// so renders are reproducible).
KwArgs make_globals(const std::tm& now);

// Helpers shared by filters and methods.
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
Value py_getitem(const Value& obj, const Value& key, int line);
Value py_getattr(const Value& obj, const std::string& name, int line);
bool py_contains(const Value& container, const Value& item, int line);
ValueList iterate(const Value& v, int line);  // list items, dict keys, string characters
int64_t py_len(const Value& v, int line);

}  // namespace ember::text::jinja
