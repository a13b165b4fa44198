// jinja interpreter: renders a parsed Body. Internal to jinja/ (Template is the public API).
// Scoping follows Jinja2: `set` inside a for-loop body or a macro stays there (hence
// namespace()); `if` opens no scope; top-level sets shadow context variables.
// Errors are thrown as TemplateError and turned into Results by Template::render.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <unordered_map>

#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace ember::text::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
  Value lookup(const std::string& name) const;
};

class Interpreter {
 public:
  Interpreter(const Value& context, const std::tm& now);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;
  std::string render(const Body& body);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow exec_body(const Body& body, Scope& scope, std::string& out);
  Flow exec(const Node& n, Scope& scope, std::string& out);
  Flow exec_for(const Node& n, Scope& scope, std::string& out);
  void exec_set(const Node& n, Scope& scope);
  Value define_macro(const Node& n);

  Value eval(const Expr& e, Scope& scope);
  Value eval_binary(const Expr& e, Scope& scope);
  Value eval_compare(const Expr& e, Scope& scope);
  Value eval_call(const Expr& e, Scope& scope);
  Value eval_slice(const Expr& e, Scope& scope);
  Value apply_filter_expr(const Expr& e, Value operand, Scope& scope);
  void eval_args(const Expr& e, Scope& scope, ValueList& args, KwArgs& kwargs);

  Scope globals_;  // builtins
  Scope root_;     // the context; top-level sets land here
  int depth_ = 0;  // macro recursion guard
  // Namespaces this render assigned an attribute of, by address (an expired entry is a freed
  // namespace whose address was reused). Emptied by ~Interpreter: see there.
  std::unordered_map<const Dict*, std::weak_ptr<Dict>> assigned_;
  int64_t steps_ = 0;  // work done by this render (bounded, see interpreter.cc)
  void count_step(int line);
};

}  // namespace ember::text::jinja
