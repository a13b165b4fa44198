// jinja AST: what the parser builds and the interpreter walks. Every node carries the source
// line it came from, so render-time errors can point at the template.
// Invariant: a parsed tree names only filters, tests, statements and methods the interpreter
// implements (the parser checks; see builtins.h), so rendering never meets an unknown one.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja/value.h"

namespace ember::text::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args: the elements
    kTuple,    // args: the elements (a list at run time; also an assignment target)
    kDict,     // kwargs_expr: key expr in args[2i], value in args[2i+1]
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d] (b, c, d may be null)
    kCall,     // a(args, kwargs)
    kFilter,   // a | name(args, kwargs); a null when it filters a {% filter %} block's body
    kTest,     // a is [not] name(args)
    kUnary,    // name: "-" "+" "not"
    kBinary,   // name: + - * / // % ** ~ and or
    kCompare,  // a, then ops[i] against args[i]
    kCond,     // b if a else c (c may be null: undefined)
  };
  Kind kind;
  int line = 0;
  Value literal;
  std::string name;
  bool negated = false;  // `is not`
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare: "==", "!=", "<", "<=", ">", ">=", "in", "not in"

  Expr(Kind k, int l) : kind(k), line(l) {}
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (cond, body)...; else_body
    kFor,          // targets in expr [if cond]: body; else_body
    kSet,          // targets (or ns.attr: target + attr) = expr
    kSetBlock,     // {% set target %}body{% endset %}
    kMacro,        // name(params with defaults): body
    kFilterBlock,  // expr (a filter chain over the body)
    kPassBlock,    // a block rendered as is ({% generation %})
    kBreak,
    kContinue,
  };
  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute: targets[0].attr
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro; default may be null

  Node(Kind k, int l) : kind(k), line(l) {}
};

}  // namespace ember::text::jinja
