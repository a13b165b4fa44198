#include "text/jinja/interpreter.h"

#include <fmt/format.h>

#include <cmath>

#include "text/jinja/builtins.h"

namespace ember::text::jinja {

namespace {
constexpr int kMaxMacroDepth = 64;
// Work bounds: a template (from a model file) cannot make a render run unbounded. Real chat
// templates use a few thousand steps and kilobytes.
constexpr int64_t kMaxSteps = 5'000'000;             // nodes executed + expressions evaluated
constexpr size_t kMaxValueBytes = size_t{16} << 20;  // one string built by repetition, or output

bool is_int_like(const Value& v) {
  return v.is_int() || v.is_bool();
}

ValueList unpack(const Value& v, size_t n, int line) {
  ValueList items = iterate(v, line);
  if (items.size() != n) {
    throw TemplateError(line,
                        fmt::format("cannot unpack {} values into {} names", items.size(), n));
  }
  return items;
}
}  // namespace

Value Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  return Value::undefined(name);
}

Interpreter::Interpreter(const Value& context, const std::tm& now) {
  for (auto& [k, v] : make_globals(now)) globals_.vars[k] = v;
  root_.parent = &globals_;
  if (context.is_dict()) {
    for (const auto& [k, v] : context.dict_ref().items) root_.vars[k] = v;
  }
}

// Assigning a namespace attribute is the only way a template can make a value hold itself
// (`{% set ns.self = ns %}`, or a list holding the namespace it is stored in): shared ownership
// never frees such a cycle. So the namespaces this render assigned to are emptied when it ends
// (its output is text; no value outlives it), which breaks every cycle it made.
Interpreter::~Interpreter() {
  for (auto& [addr, weak] : assigned_) {
    if (std::shared_ptr<Dict> d = weak.lock()) {
      auto items = std::move(d->items);
      d->items.clear();
    }
  }
}

std::string Interpreter::render(const Body& body) {
  std::string out;
  exec_body(body, root_, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, Scope& scope, std::string& out) {
  for (const auto& n : body) {
    Flow f = exec(*n, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

void Interpreter::count_step(int line) {
  if (++steps_ > kMaxSteps) {
    throw TemplateError(line,
                        fmt::format("template does too much work (over {} steps)", kMaxSteps));
  }
}

Interpreter::Flow Interpreter::exec(const Node& n, Scope& scope, std::string& out) {
  count_step(n.line);
  if (out.size() > kMaxValueBytes) {
    throw TemplateError(n.line, fmt::format("template output is over {} bytes", kMaxValueBytes));
  }
  switch (n.kind) {
    case Node::Kind::kText:
      out += n.text;
      return Flow::kNormal;
    case Node::Kind::kOutput:
      out += eval(*n.expr, scope).to_str();
      return Flow::kNormal;
    case Node::Kind::kIf:
      for (const auto& [cond, body] : n.branches) {
        if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
      }
      return exec_body(n.else_body, scope, out);
    case Node::Kind::kFor:
      return exec_for(n, scope, out);
    case Node::Kind::kSet:
      exec_set(n, scope);
      return Flow::kNormal;
    case Node::Kind::kSetBlock: {
      std::string captured;
      exec_body(n.body, scope, captured);
      scope.vars[n.targets[0]] = Value(std::move(captured));
      return Flow::kNormal;
    }
    case Node::Kind::kMacro:
      scope.vars[n.name] = define_macro(n);
      return Flow::kNormal;
    case Node::Kind::kFilterBlock: {
      std::string captured;
      exec_body(n.body, scope, captured);
      out += apply_filter_expr(*n.expr, Value(std::move(captured)), scope).to_str();
      return Flow::kNormal;
    }
    case Node::Kind::kPassBlock:
      return exec_body(n.body, scope, out);
    case Node::Kind::kBreak:
      return Flow::kBreak;
    case Node::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Node& n, Scope& scope, std::string& out) {
  Value seq = eval(*n.expr, scope);
  if (!(seq.is_undefined() || seq.is_list() || seq.is_dict() || seq.is_string())) {
    throw TemplateError(n.line, fmt::format("'{}' object is not iterable", seq.type_name()));
  }
  ValueList all = iterate(seq, n.line);
  auto bind = [&](Scope& s, const Value& item) {
    if (n.targets.size() == 1) {
      s.vars[n.targets[0]] = item;
    } else {
      ValueList parts = unpack(item, n.targets.size(), n.line);
      for (size_t i = 0; i < parts.size(); ++i) s.vars[n.targets[i]] = parts[i];
    }
  };
  ValueList items;
  if (n.cond) {
    for (const Value& item : all) {
      Scope s;
      s.parent = &scope;
      bind(s, item);
      if (eval(*n.cond, s).truthy()) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  if (items.empty()) return exec_body(n.else_body, scope, out);
  const auto len = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < len; ++i) {
    Scope s;  // a fresh scope per iteration, as Jinja2 has
    s.parent = &scope;
    bind(s, items[static_cast<size_t>(i)]);
    Value loop = Value::dict();
    Dict& d = loop.dict_ref();
    d.set("index", Value(i + 1));
    d.set("index0", Value(i));
    d.set("revindex", Value(len - i));
    d.set("revindex0", Value(len - i - 1));
    d.set("first", Value(i == 0));
    d.set("last", Value(i == len - 1));
    d.set("length", Value(len));
    d.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem"));
    d.set("nextitem",
          i + 1 < len ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem"));
    d.set("depth", Value(1));
    d.set("depth0", Value(0));
    s.vars["loop"] = loop;
    if (exec_body(n.body, s, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

void Interpreter::exec_set(const Node& n, Scope& scope) {
  Value v = eval(*n.expr, scope);
  if (!n.attr.empty()) {
    Value target = scope.lookup(n.targets[0]);
    if (!target.is_namespace()) {
      throw TemplateError(n.line, fmt::format("cannot assign attribute '{}' on '{}': it is a {}, "
                                              "not a namespace",
                                              n.attr, n.targets[0], target.type_name()));
    }
    const std::shared_ptr<Dict>& d = target.ns_ptr();
    auto [it, fresh] = assigned_.try_emplace(d.get(), d);
    if (!fresh && it->second.expired()) it->second = d;
    d->set(n.attr, std::move(v));
    return;
  }
  if (n.targets.size() == 1) {
    scope.vars[n.targets[0]] = std::move(v);
    return;
  }
  ValueList parts = unpack(v, n.targets.size(), n.line);
  for (size_t i = 0; i < parts.size(); ++i) scope.vars[n.targets[i]] = parts[i];
}

Value Interpreter::define_macro(const Node& n) {
  auto c = std::make_shared<Callable>();
  c->name = n.name;
  const Node* node = &n;
  c->fn = [this, node](ValueList& args, KwArgs& kwargs, int line) -> Value {
    if (args.size() > node->params.size()) {
      throw TemplateError(line, fmt::format("macro '{}' takes {} arguments, {} given", node->name,
                                            node->params.size(), args.size()));
    }
    if (depth_ >= kMaxMacroDepth) {
      throw TemplateError(line, fmt::format("macro '{}': recursion too deep", node->name));
    }
    Scope s;
    s.parent = &root_;
    for (size_t i = 0; i < node->params.size(); ++i) {
      const auto& [pname, pdefault] = node->params[i];
      Value v = Value::undefined(pname);
      if (i < args.size()) {
        v = args[i];
      } else if (pdefault) {
        v = eval(*pdefault, s);
      }
      s.vars[pname] = v;
    }
    for (auto& [k, v] : kwargs) {
      bool known = false;
      for (const auto& p : node->params) known |= p.first == k;
      if (!known) {
        throw TemplateError(line, fmt::format("macro '{}' has no argument '{}'", node->name, k));
      }
      s.vars[k] = v;
    }
    std::string out;
    ++depth_;
    exec_body(node->body, s, out);
    --depth_;
    return Value(std::move(out));
  };
  return Value(CallableRef(c));
}

void Interpreter::eval_args(const Expr& e, Scope& scope, ValueList& args, KwArgs& kwargs) {
  for (const auto& a : e.args) args.push_back(eval(*a, scope));
  for (const auto& [k, a] : e.kwargs) kwargs.emplace_back(k, eval(*a, scope));
}

Value Interpreter::apply_filter_expr(const Expr& e, Value operand, Scope& scope) {
  if (e.a) operand = apply_filter_expr(*e.a, std::move(operand), scope);
  ValueList args;
  KwArgs kwargs;
  eval_args(e, scope, args, kwargs);
  return apply_filter(e.name, operand, args, kwargs, e.line);
}

Value Interpreter::eval(const Expr& e, Scope& scope) {
  count_step(e.line);
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return scope.lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList l;
      for (const auto& a : e.args) l.push_back(eval(*a, scope));
      return e.kind == Expr::Kind::kTuple ? Value::tuple(std::move(l)) : Value(std::move(l));
    }
    case Expr::Kind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value k = eval(*e.args[i], scope);
        if (!k.is_string()) throw TemplateError(e.line, "dict keys must be strings");
        d.dict_ref().set(k.str(), eval(*e.args[i + 1], scope));
      }
      return d;
    }
    case Expr::Kind::kAttr:
      return py_getattr(eval(*e.a, scope), e.name, e.line);
    case Expr::Kind::kItem:
      return py_getitem(eval(*e.a, scope), eval(*e.b, scope), e.line);
    case Expr::Kind::kSlice:
      return eval_slice(e, scope);
    case Expr::Kind::kCall:
      return eval_call(e, scope);
    case Expr::Kind::kFilter: {
      Value operand = eval(*e.a, scope);
      ValueList args;
      KwArgs kwargs;
      eval_args(e, scope, args, kwargs);
      return apply_filter(e.name, operand, args, kwargs, e.line);
    }
    case Expr::Kind::kTest: {
      Value operand = eval(*e.a, scope);
      ValueList args;
      KwArgs kwargs;
      eval_args(e, scope, args, kwargs);
      bool r = apply_test(e.name, operand, args, e.line);
      return Value(e.negated ? !r : r);
    }
    case Expr::Kind::kUnary: {
      Value v = eval(*e.a, scope);
      if (e.name == "not") return Value(!v.truthy());
      if (!v.is_number()) {
        throw TemplateError(
            e.line, fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
      }
      if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
      return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
    }
    case Expr::Kind::kBinary:
      return eval_binary(e, scope);
    case Expr::Kind::kCompare:
      return eval_compare(e, scope);
    case Expr::Kind::kCond:
      if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
      return e.c ? eval(*e.c, scope) : Value::undefined();
  }
  return Value::undefined();
}

Value Interpreter::eval_call(const Expr& e, Scope& scope) {
  ValueList args;
  KwArgs kwargs;
  if (e.a->kind == Expr::Kind::kAttr) {
    Value obj = eval(*e.a->a, scope);
    eval_args(e, scope, args, kwargs);
    if (auto r = call_method(obj, e.a->name, args, kwargs, e.line)) return *r;
    Value f = py_getattr(obj, e.a->name, e.line);
    if (!f.is_callable()) {
      throw TemplateError(
          e.line, fmt::format("'{}' object has no method '{}'", obj.type_name(), e.a->name));
    }
    return f.callable().fn(args, kwargs, e.line);
  }
  Value f = eval(*e.a, scope);
  eval_args(e, scope, args, kwargs);
  if (!f.is_callable()) {
    std::string what = e.a->kind == Expr::Kind::kName ? "'" + e.a->name + "'" : "value";
    if (f.is_undefined()) {
      throw TemplateError(e.line, fmt::format("{} is undefined (called before its macro was "
                                              "defined?)",
                                              what));
    }
    throw TemplateError(e.line, fmt::format("{} ({}) is not callable", what, f.type_name()));
  }
  return f.callable().fn(args, kwargs, e.line);
}

Value Interpreter::eval_slice(const Expr& e, Scope& scope) {
  Value obj = eval(*e.a, scope);
  auto bound = [&](const ExprPtr& x) -> std::optional<int64_t> {
    if (!x) return std::nullopt;
    Value v = eval(*x, scope);
    if (v.is_none()) return std::nullopt;
    if (!is_int_like(v)) throw TemplateError(e.line, "slice indices must be integers");
    return v.as_int();
  };
  std::optional<int64_t> start = bound(e.b), stop = bound(e.c), step_opt = bound(e.d);
  int64_t step = step_opt.value_or(1);
  if (step == 0) throw TemplateError(e.line, "slice step cannot be zero");
  std::u32string chars;
  int64_t n;
  if (obj.is_string()) {
    chars = utf8_decode(obj.str());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.list().size());
  } else {
    throw TemplateError(e.line, fmt::format("'{}' object cannot be sliced", obj.type_name()));
  }
  // Python's slice.indices()
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) x += n;
    if (step > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t lo = clamp(start, step > 0 ? 0 : n - 1);
  int64_t hi = clamp(stop, step > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi; i += step) idx.push_back(i);
  if (obj.is_string()) {
    std::u32string r;
    for (int64_t i : idx) r += chars[static_cast<size_t>(i)];
    return Value(utf8_encode(r));
  }
  ValueList r;
  for (int64_t i : idx) r.push_back(obj.list()[static_cast<size_t>(i)]);
  return Value(std::move(r));
}

Value Interpreter::eval_compare(const Expr& e, Scope& scope) {
  Value left = eval(*e.a, scope);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.args[i], scope);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = values_equal(left, right);
    } else if (op == "!=") {
      r = !values_equal(left, right);
    } else if (op == "in") {
      r = py_contains(right, left, e.line);
    } else if (op == "not in") {
      r = !py_contains(right, left, e.line);
    } else {
      int c = compare_values(left, right, e.line);
      r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!r) return Value(false);
    left = std::move(right);
  }
  return Value(true);
}

Value Interpreter::eval_binary(const Expr& e, Scope& scope) {
  const std::string& op = e.name;
  if (op == "and") {
    Value a = eval(*e.a, scope);
    return a.truthy() ? eval(*e.b, scope) : a;
  }
  if (op == "or") {
    Value a = eval(*e.a, scope);
    return a.truthy() ? a : eval(*e.b, scope);
  }
  Value a = eval(*e.a, scope);
  Value b = eval(*e.b, scope);
  if (op == "~") return Value(a.to_str() + b.to_str());
  auto type_error = [&]() -> TemplateError {
    if (a.is_undefined() || b.is_undefined()) {
      const Value& u = a.is_undefined() ? a : b;
      return TemplateError(e.line, fmt::format("'{}' is undefined", u.undefined_hint()));
    }
    return TemplateError(e.line, fmt::format("unsupported operand types for {}: '{}' and '{}'", op,
                                             a.type_name(), b.type_name()));
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value(a.str() + b.str());
    if (a.is_list() && b.is_list()) {
      ValueList r = a.list();
      r.insert(r.end(), b.list().begin(), b.list().end());
      return Value(std::move(r));
    }
  }
  if (op == "*") {
    const Value* s = a.is_string() || a.is_list()   ? &a
                     : b.is_string() || b.is_list() ? &b
                                                    : nullptr;
    const Value* k = s == &a ? &b : &a;
    if (s && is_int_like(*k)) {
      int64_t times = std::max<int64_t>(0, k->as_int());
      const size_t unit = s->is_string() ? s->str().size() : s->list().size() * 16;
      if (unit > 0 && uint64_t(times) > kMaxValueBytes / unit) {
        throw TemplateError(e.line, "repetition result is too large");
      }
      if (s->is_string()) {
        std::string r;
        for (int64_t i = 0; i < times; ++i) r += s->str();
        return Value(std::move(r));
      }
      ValueList r;
      for (int64_t i = 0; i < times; ++i) r.insert(r.end(), s->list().begin(), s->list().end());
      return Value(std::move(r));
    }
  }
  if (!a.is_number() || !b.is_number()) throw type_error();
  bool ints = is_int_like(a) && is_int_like(b);
  if (op == "/") {
    if (b.as_double() == 0.0) throw TemplateError(e.line, "division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0.0) throw TemplateError(e.line, "integer division or modulo by zero");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    double x = a.as_double(), y = b.as_double();
    double q = std::floor(x / y);
    return op == "//" ? Value(q) : Value(x - q * y);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t r = 1;
      for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
      return Value(r);
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  if (ints) {
    int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
  } else {
    double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value(x + y);
    if (op == "-") return Value(x - y);
    if (op == "*") return Value(x * y);
  }
  throw type_error();
}

}  // namespace ember::text::jinja
