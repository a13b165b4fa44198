// jinja::Template: the public face of ember's Jinja2-subset interpreter. parse() lexes, parses
// and validates the whole template up front (an unsupported filter, test, statement or method
// is an error naming it and its line); render() walks the tree against a context dict.
// Behaves like jinja2.Environment(trim_blocks=True, lstrip_blocks=True) with Jinja2's default
// Undefined (missing attributes are undefined: falsy, printed as ""; using one further is an
// error), which is how Hugging Face renders chat templates.
// A Template is immutable after parse and may be rendered from several threads at once.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "base/result.h"
#include "text/jinja/ast.h"
#include "text/jinja/value.h"

namespace ember::text::jinja {

class Template {
 public:
  // `name` prefixes error messages: "<name> line 3: unsupported filter 'wordwrap'".
  static Result<Template> parse(std::string_view source, std::string name = "template");

  // `context` must be a dict; its keys become the template's variables. strftime_now() formats
  // `now`. A raise_exception(msg) in the template fails with exactly msg.
  Result<std::string> render(const Value& context, const std::tm& now) const;

 private:
  Template(std::shared_ptr<const Body> body, std::string name)
      : body_(std::move(body)), name_(std::move(name)) {}
  std::shared_ptr<const Body> body_;
  std::string name_;
};

}  // namespace ember::text::jinja
