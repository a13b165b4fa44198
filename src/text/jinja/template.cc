#include "text/jinja/template.h"

#include <fmt/format.h>

#include "text/jinja/interpreter.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace ember::text::jinja {

namespace {
Error to_error(const std::string& name, const TemplateError& e) {
  if (e.raw) return Error{e.what()};
  if (e.line > 0) return fail("{} line {}: {}", name, e.line, e.what());
  return fail("{}: {}", name, e.what());
}
}  // namespace

Result<Template> Template::parse(std::string_view source, std::string name) {
  try {
    auto body = std::make_shared<Body>(jinja::parse(lex(source)));
    return Template(std::move(body), std::move(name));
  } catch (const TemplateError& e) {
    return to_error(name, e);
  } catch (const std::exception& e) {  // whatever a library call throws (std::bad_alloc, ...)
    return fail("{}: {}", name, e.what());
  }
}

Result<std::string> Template::render(const Value& context, const std::tm& now) const {
  try {
    Interpreter interp(context, now);
    return interp.render(*body_);
  } catch (const TemplateError& e) {
    return to_error(name_, e);
  } catch (const std::exception& e) {  // e.g. std::bad_alloc, a std::stoll on odd input
    return fail("{}: {}", name_, e.what());
  }
}

}  // namespace ember::text::jinja
