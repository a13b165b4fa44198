#include "text/jinja/parser.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <set>

#include "text/jinja/builtins.h"

namespace ember::text::jinja {

namespace {

// A lexed integer (digits only) as a value; past int64 it is an error naming the literal.
Value int_literal(const std::string& digits, int line) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (ec != std::errc() || end != digits.data() + digits.size()) {
    throw TemplateError(line, fmt::format("integer literal {} is out of range", digits));
  }
  return Value(v);
}

// Tests and filters named by string arguments (selectattr('role', 'equalto', ...),
// map('upper')) are checked at parse time too when the name is a literal.
const std::set<std::string, std::less<>> kTestTakingFilters = {"select", "reject", "selectattr",
                                                               "rejectattr"};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& t) : toks_(t) {}

  Body parse_template() {
    Body body = parse_body({});
    validate_calls();
    return body;
  }

 private:
  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  std::set<std::string> macros_;
  std::vector<std::pair<std::string, int>> called_names_;  // checked once all macros are known
  int loop_depth_ = 0;
  int nesting_ =
      0;  // recursion depth of the parser: a hostile template must not overflow the stack

  struct NestGuard {
    explicit NestGuard(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) throw TemplateError(p_.line(), "template nests too deeply");
    }
    ~NestGuard() { --p_.nesting_; }
    Parser& p_;
  };
  static constexpr int kMaxNesting = 200;

  const Token& peek(size_t ahead = 0) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  const Token& next() { return toks_[std::min(pos_++, toks_.size() - 1)]; }
  int line() const { return peek().line; }

  [[noreturn]] void fail_here(const std::string& msg) const { throw TemplateError(line(), msg); }

  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokKind::kOp && peek(ahead).value == op;
  }
  bool is_name(std::string_view n, size_t ahead = 0) const {
    return peek(ahead).kind == TokKind::kName && peek(ahead).value == n;
  }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool accept_name(std::string_view n) {
    if (!is_name(n)) return false;
    ++pos_;
    return true;
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) fail_here(fmt::format("expected '{}', found {}", op, describe(peek())));
  }
  std::string expect_name() {
    if (peek().kind != TokKind::kName)
      fail_here(fmt::format("expected a name, found {}", describe(peek())));
    return next().value;
  }
  void expect_block_end() {
    if (peek().kind != TokKind::kBlockEnd) {
      fail_here(fmt::format("expected end of statement '%}}', found {}", describe(peek())));
    }
    ++pos_;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokKind::kBlockEnd:
        return "'%}'";
      case TokKind::kVarEnd:
        return "'}}'";
      case TokKind::kEof:
        return "end of template";
      case TokKind::kString:
        return "a string";
      case TokKind::kText:
        return "template text";
      default:
        return "'" + t.value + "'";
    }
  }

  // ---- statements ----

  // Parses nodes until a block tag whose keyword is in `ends` (left unconsumed: pos_ at its name).
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokKind::kEof) {
        if (!ends.empty()) {
          fail_here(fmt::format("missing '{{% {} %}}' (unclosed block)", *ends.rbegin()));
        }
        return body;
      }
      if (t.kind == TokKind::kText) {
        auto n = std::make_unique<Node>(Node::Kind::kText, t.line);
        n->text = t.value;
        body.push_back(std::move(n));
        ++pos_;
      } else if (t.kind == TokKind::kVarBegin) {
        ++pos_;
        auto n = std::make_unique<Node>(Node::Kind::kOutput, t.line);
        n->expr = parse_expression();
        if (peek().kind != TokKind::kVarEnd) {
          fail_here(fmt::format("expected '}}}}', found {}", describe(peek())));
        }
        ++pos_;
        body.push_back(std::move(n));
      } else if (t.kind == TokKind::kBlockBegin) {
        ++pos_;
        const Token& kw = peek();
        if (kw.kind != TokKind::kName) fail_here("expected a statement name after '{%'");
        if (ends.count(kw.value)) return body;
        body.push_back(parse_statement());
      } else {
        fail_here(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  NodePtr parse_statement() {
    NestGuard guard(*this);
    const Token& kw = next();
    int l = kw.line;
    const std::string& k = kw.value;
    if (k == "if") return parse_if(l);
    if (k == "for") return parse_for(l);
    if (k == "set") return parse_set(l);
    if (k == "macro") return parse_macro(l);
    if (k == "filter") return parse_filter_block(l);
    if (k == "generation") {
      auto n = std::make_unique<Node>(Node::Kind::kPassBlock, l);
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      end_block("endgeneration");
      return n;
    }
    if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) throw TemplateError(l, fmt::format("'{}' outside of a for loop", k));
      expect_block_end();
      return std::make_unique<Node>(k == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, l);
    }
    static const std::set<std::string> kEnds = {"endif",    "endfor", "else",      "elif",
                                                "endmacro", "endset", "endfilter", "endgeneration"};
    if (kEnds.count(k)) throw TemplateError(l, fmt::format("unexpected '{}'", k));
    throw TemplateError(l, fmt::format("unsupported statement '{}'", k));
  }

  void end_block(const char* name) {
    ++pos_;  // the end keyword
    (void)name;
    expect_block_end();
  }

  NodePtr parse_if(int l) {
    auto n = std::make_unique<Node>(Node::Kind::kIf, l);
    ExprPtr cond = parse_expression();
    expect_block_end();
    while (true) {
      Body body = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(body));
      std::string k = next().value;
      if (k == "elif") {
        cond = parse_expression();
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (k == "else") {
        n->else_body = parse_body({"endif"});
        end_block("endif");
      }
      return n;
    }
  }

  NodePtr parse_for(int l) {
    auto n = std::make_unique<Node>(Node::Kind::kFor, l);
    do {
      n->targets.push_back(expect_name());
    } while (accept_op(","));
    if (!accept_name("in")) fail_here("expected 'in' in for loop");
    n->expr = parse_or();  // `for x in xs if c`: the `if` filters, it is no conditional
    if (accept_name("if")) n->cond = parse_expression();
    if (accept_name("recursive")) throw TemplateError(l, "unsupported for-loop option 'recursive'");
    expect_block_end();
    ++loop_depth_;
    n->body = parse_body({"else", "endfor"});
    --loop_depth_;
    if (next().value == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"});
      end_block("endfor");
    } else {
      expect_block_end();
    }
    return n;
  }

  NodePtr parse_set(int l) {
    std::vector<std::string> targets;
    std::string attr;
    targets.push_back(expect_name());
    if (accept_op(".")) {
      attr = expect_name();
    } else {
      while (accept_op(",")) targets.push_back(expect_name());
    }
    if (peek().kind == TokKind::kBlockEnd && attr.empty() && targets.size() == 1) {
      auto n = std::make_unique<Node>(Node::Kind::kSetBlock, l);
      n->targets = std::move(targets);
      expect_block_end();
      n->body = parse_body({"endset"});
      end_block("endset");
      return n;
    }
    auto n = std::make_unique<Node>(Node::Kind::kSet, l);
    n->targets = std::move(targets);
    n->attr = std::move(attr);
    expect_op("=");
    n->expr = parse_tuple_or_expression();
    expect_block_end();
    return n;
  }

  NodePtr parse_macro(int l) {
    auto n = std::make_unique<Node>(Node::Kind::kMacro, l);
    n->name = expect_name();
    macros_.insert(n->name);
    expect_op("(");
    while (!accept_op(")")) {
      std::string p = expect_name();
      ExprPtr def;
      if (accept_op("=")) def = parse_expression();
      n->params.emplace_back(std::move(p), std::move(def));
      if (!is_op(")")) expect_op(",");
    }
    expect_block_end();
    int saved = loop_depth_;
    loop_depth_ = 0;
    n->body = parse_body({"endmacro"});
    loop_depth_ = saved;
    end_block("endmacro");
    return n;
  }

  NodePtr parse_filter_block(int l) {
    auto n = std::make_unique<Node>(Node::Kind::kFilterBlock, l);
    ExprPtr chain;  // null operand: the block's rendered body
    do {
      chain = parse_filter(std::move(chain));
    } while (accept_op("|"));
    n->expr = std::move(chain);
    expect_block_end();
    n->body = parse_body({"endfilter"});
    end_block("endfilter");
    return n;
  }

  // ---- expressions ----

  ExprPtr make(Expr::Kind k, int l) { return std::make_unique<Expr>(k, l); }

  ExprPtr parse_tuple_or_expression() {
    int l = line();
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::kTuple, l);
    t->args.push_back(std::move(first));
    while (accept_op(",")) t->args.push_back(parse_expression());
    return t;
  }

  ExprPtr parse_expression() {
    NestGuard guard(*this);
    int l = line();
    ExprPtr e = parse_or();
    if (is_name("if")) {
      ++pos_;
      auto c = make(Expr::Kind::kCond, l);
      c->a = parse_or();
      c->b = std::move(e);
      if (accept_name("else")) c->c = parse_expression();
      return c;
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int l) {
    auto e = make(Expr::Kind::kBinary, l);
    e->name = std::move(op);
    e->a = std::move(a);
    e->b = std::move(b);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      int l = next().line;
      e = binary("or", std::move(e), parse_and(), l);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      int l = next().line;
      e = binary("and", std::move(e), parse_not(), l);
    }
    return e;
  }

  ExprPtr parse_not() {
    NestGuard guard(*this);
    if (is_name("not")) {
      auto e = make(Expr::Kind::kUnary, next().line);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int l = line();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.kind == TokKind::kOp && (t.value == "==" || t.value == "!=" || t.value == "<" ||
                                     t.value == "<=" || t.value == ">" || t.value == ">=")) {
        op = t.value;
        ++pos_;
      } else if (is_name("in")) {
        op = "in";
        ++pos_;
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, l);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.value, std::move(e), parse_concat(), t.line);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      int l = next().line;
      e = binary("~", std::move(e), parse_math2(), l);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.value, std::move(e), parse_pow(), t.line);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      int l = next().line;
      e = binary("**", std::move(e), parse_unary(true), l);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    NestGuard guard(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make(Expr::Kind::kUnary, t.line);
      e->name = t.value;
      e->a = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = next();
    int l = t.line;
    switch (t.kind) {
      case TokKind::kString: {
        std::string s = t.value;
        while (peek().kind == TokKind::kString) s += next().value;  // adjacent literals join
        auto e = make(Expr::Kind::kLiteral, l);
        e->literal = Value(s);
        return e;
      }
      case TokKind::kInt: {
        auto e = make(Expr::Kind::kLiteral, l);
        e->literal = int_literal(t.value, l);
        return e;
      }
      case TokKind::kFloat: {
        auto e = make(Expr::Kind::kLiteral, l);
        e->literal = Value(std::strtod(t.value.c_str(), nullptr));  // 1e999 is inf, as in Python
        return e;
      }
      case TokKind::kName: {
        auto e = make(Expr::Kind::kLiteral, l);
        if (t.value == "true" || t.value == "True") {
          e->literal = Value(true);
        } else if (t.value == "false" || t.value == "False") {
          e->literal = Value(false);
        } else if (t.value == "none" || t.value == "None") {
          e->literal = Value::none();
        } else {
          e = make(Expr::Kind::kName, l);
          e->name = t.value;
        }
        return e;
      }
      case TokKind::kOp:
        if (t.value == "(") {
          if (accept_op(")")) return make(Expr::Kind::kTuple, l);
          ExprPtr inner = parse_expression();
          if (is_op(",")) {
            auto tup = make(Expr::Kind::kTuple, l);
            tup->args.push_back(std::move(inner));
            while (accept_op(",")) {
              if (is_op(")")) break;
              tup->args.push_back(parse_expression());
            }
            inner = std::move(tup);
          }
          expect_op(")");
          return inner;
        }
        if (t.value == "[") {
          auto e = make(Expr::Kind::kList, l);
          while (!accept_op("]")) {
            e->args.push_back(parse_expression());
            if (!is_op("]")) expect_op(",");
          }
          return e;
        }
        if (t.value == "{") {
          auto e = make(Expr::Kind::kDict, l);
          while (!accept_op("}")) {
            e->args.push_back(parse_expression());
            expect_op(":");
            e->args.push_back(parse_expression());
            if (!is_op("}")) expect_op(",");
          }
          return e;
        }
        break;
      default:
        break;
    }
    throw TemplateError(l, fmt::format("unexpected {} in expression", describe(t)));
  }

  void parse_call_args(Expr& e) {
    // pos_ is just past '('
    while (!accept_op(")")) {
      if (is_op("*") || is_op("**")) fail_here("unsupported '*args' / '**kwargs' in a call");
      if (peek().kind == TokKind::kName && is_op("=", 1)) {
        std::string k = next().value;
        ++pos_;
        e.kwargs.emplace_back(std::move(k), parse_expression());
      } else {
        if (!e.kwargs.empty()) fail_here("positional argument after keyword argument");
        e.args.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        int l = next().line;
        auto a = make(Expr::Kind::kAttr, l);
        if (peek().kind == TokKind::kInt) {  // x.0 is x[0] in Jinja
          auto idx = make(Expr::Kind::kLiteral, l);
          idx->literal = int_literal(next().value, l);
          a = make(Expr::Kind::kItem, l);
          a->b = std::move(idx);
        } else {
          a->name = expect_name();
        }
        a->a = std::move(e);
        e = std::move(a);
      } else if (is_op("[")) {
        int l = next().line;
        ExprPtr start, stop, step;
        bool slice = false;
        if (!is_op(":")) start = parse_expression();
        if (accept_op(":")) {
          slice = true;
          if (!is_op(":") && !is_op("]")) stop = parse_expression();
          if (accept_op(":") && !is_op("]")) step = parse_expression();
        }
        expect_op("]");
        auto s = make(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, l);
        s->a = std::move(e);
        s->b = std::move(start);
        s->c = std::move(stop);
        s->d = std::move(step);
        e = std::move(s);
      } else if (is_op("(")) {
        int l = next().line;
        auto c = make(Expr::Kind::kCall, l);
        parse_call_args(*c);
        if (e->kind == Expr::Kind::kAttr && !is_known_method(e->name)) {
          throw TemplateError(l, fmt::format("unsupported method '{}'", e->name));
        }
        if (e->kind == Expr::Kind::kName) called_names_.emplace_back(e->name, l);
        c->a = std::move(e);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter(ExprPtr operand) {
    int l = line();
    auto f = make(Expr::Kind::kFilter, l);
    f->name = expect_name();
    if (!is_known_filter(f->name)) {
      throw TemplateError(l, fmt::format("unsupported filter '{}'", f->name));
    }
    if (accept_op("(")) parse_call_args(*f);
    check_named_args(*f);
    f->a = std::move(operand);
    return f;
  }

  // select('equalto', ...) and map('trim') name a test or filter by string: check it now.
  void check_named_args(const Expr& f) {
    size_t idx = f.name == "selectattr" || f.name == "rejectattr" ? 1 : 0;
    bool names_test = kTestTakingFilters.count(f.name) > 0;
    bool names_filter = f.name == "map" && f.kwargs.empty();
    if (!(names_test || names_filter) || f.args.size() <= idx) return;
    const Expr& a = *f.args[idx];
    if (a.kind != Expr::Kind::kLiteral || !a.literal.is_string()) return;
    const std::string& n = a.literal.str();
    if (names_test && !is_known_test(n)) {
      throw TemplateError(f.line, fmt::format("unsupported test '{}'", n));
    }
    if (names_filter && !is_known_filter(n)) {
      throw TemplateError(f.line, fmt::format("unsupported filter '{}'", n));
    }
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (accept_op("|")) {
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        int l = next().line;
        auto t = make(Expr::Kind::kTest, l);
        t->negated = accept_name("not");
        t->name = expect_name();
        if (!is_known_test(t->name)) {
          throw TemplateError(l, fmt::format("unsupported test '{}'", t->name));
        }
        if (accept_op("(")) {
          parse_call_args(*t);
        } else {
          const Token& n = peek();
          bool starts_arg = n.kind == TokKind::kString || n.kind == TokKind::kInt ||
                            n.kind == TokKind::kFloat ||
                            (n.kind == TokKind::kName && n.value != "else" && n.value != "or" &&
                             n.value != "and" && n.value != "if" && n.value != "is") ||
                            (n.kind == TokKind::kOp && (n.value == "[" || n.value == "{"));
          if (starts_arg) t->args.push_back(parse_postfix(parse_primary()));
        }
        t->a = std::move(e);
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  void validate_calls() {
    for (const auto& [name, l] : called_names_) {
      if (!is_known_global(name) && !macros_.count(name)) {
        throw TemplateError(l, fmt::format("unknown function '{}'", name));
      }
    }
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  return Parser(tokens).parse_template();
}

}  // namespace ember::text::jinja
