// jinja parser: tokens -> AST, with Jinja2's operator precedence (filters and tests bind
// tighter than arithmetic: `a + b | trim` is `a + (b | trim)`; `not x is none` is
// `not (x is none)`). Validates every filter, test, statement, method and called function
// against what the interpreter implements; throws TemplateError naming the construct and line.
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/lexer.h"

namespace ember::text::jinja {

Body parse(const std::vector<Token>& tokens);

}  // namespace ember::text::jinja
