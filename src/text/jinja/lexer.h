// jinja lexer: template source -> tokens, with Jinja2's whitespace rules already applied to the
// text between tags, as Hugging Face configures them for chat templates:
//   - `{%-` / `{{-` / `{#-` strip all whitespace before the tag, `-%}` / `-}}` / `-#}` after it;
//   - trim_blocks: the first newline after a block or comment tag is removed;
//   - lstrip_blocks: spaces and tabs from the start of a line up to a block or comment tag are
//     removed (`{%+` opts out, as `+%}` opts out of trim_blocks);
//   - keep_trailing_newline=False: one trailing newline of the source is dropped.
// Comments produce no tokens. Throws TemplateError (with the line) on malformed input.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ember::text::jinja {

enum class TokKind {
  kText,        // literal template text (value)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifiers and keywords
  kString,      // value: the decoded string
  kInt,
  kFloat,
  kOp,  // operators and punctuation: + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
  kEof,
};

struct Token {
  TokKind kind;
  std::string value;
  int line;
};

std::vector<Token> lex(std::string_view source);

}  // namespace ember::text::jinja
