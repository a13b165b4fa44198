// jinja interpreter: what it refuses. Unsupported constructs fail at parse time naming the
// construct and its line; runtime mistakes fail the render with a message, never a wrong prompt.
#include "jinja_test_util.h"

#include <thread>

namespace ember::text::jinja::testing {
namespace {

TEST(JinjaErrors, unsupported_filter_is_a_parse_error_with_its_line) {
  EXPECT_EQ(parse_error("a\nb\n{{ x | wordwrap(10) }}"), "t line 3: unsupported filter 'wordwrap'");
}

TEST(JinjaErrors, unsupported_test_is_a_parse_error_with_its_line) {
  EXPECT_EQ(parse_error("{% if x is escaped %}{% endif %}"),
            "t line 1: unsupported test 'escaped'");
  EXPECT_EQ(parse_error("\n{{ xs | selectattr('a', 'matching', 'b') }}"),
            "t line 2: unsupported test 'matching'");
}

TEST(JinjaErrors, unsupported_statement_is_a_parse_error_with_its_line) {
  EXPECT_EQ(parse_error("x\n{% include 'other.jinja' %}"),
            "t line 2: unsupported statement 'include'");
  EXPECT_EQ(parse_error("{% raw %}{{ x }}{% endraw %}"), "t line 1: unsupported statement 'raw'");
  EXPECT_EQ(parse_error("{% call m() %}x{% endcall %}"), "t line 1: unsupported statement 'call'");
}

TEST(JinjaErrors, mutating_or_unknown_methods_are_parse_errors) {
  EXPECT_EQ(parse_error("{% set xs = [] %}\n{{ xs.append(1) }}"),
            "t line 2: unsupported method 'append'");
  EXPECT_EQ(parse_error("{{ 'a'.zfill(3) }}"), "t line 1: unsupported method 'zfill'");
}

TEST(JinjaErrors, calling_an_unknown_function_is_a_parse_error) {
  EXPECT_EQ(parse_error("{{ lipsum(2) }}"), "t line 1: unknown function 'lipsum'");
  EXPECT_EQ(parse_error("{{ later() }}{% macro later() %}x{% endmacro %}"), "");
}

TEST(JinjaErrors, malformed_templates_name_what_is_wrong) {
  EXPECT_EQ(parse_error("{% if x %}never closed"),
            "t line 1: missing '{% endif %}' (unclosed block)");
  EXPECT_EQ(parse_error("{% for x in xs %}{% endif %}"), "t line 1: unexpected 'endif'");
  EXPECT_EQ(parse_error("{{ x "), "t line 1: unclosed tag (missing '}}')");
  EXPECT_EQ(parse_error("{{ 'abc }}"), "t line 1: unterminated string literal");
  EXPECT_EQ(parse_error("{% break %}"), "t line 1: 'break' outside of a for loop");
  EXPECT_EQ(parse_error("{{ 1 + }}"), "t line 1: unexpected '}}' in expression");
  // Found by jinja_fuzz: a non-hex escape threw std::invalid_argument out of the parser.
  EXPECT_EQ(parse_error("{{ '\\xZZ' }}"),
            "t line 1: invalid \\x escape in string literal: 2 hex digits expected");
  EXPECT_EQ(parse_error("{{ '\\u00g1' }}"),
            "t line 1: invalid \\u escape in string literal: 4 hex digits expected");
  EXPECT_EQ(parse_error("{{ '\\U00110000' }}"),
            "t line 1: \\U escape in string literal is not a Unicode scalar value");
  EXPECT_EQ(parse_error("{{ x.99999999999999999999 }}"),
            "t line 1: integer literal 99999999999999999999 is out of range");
}

TEST(JinjaErrors, raise_exception_fails_the_render_with_exactly_its_message) {
  EXPECT_EQ(render("ok{% if x %}{{ raise_exception('Only user and assistant roles!') }}{% endif %}",
                   R"({"x": true})"),
            "ERROR: Only user and assistant roles!");
  EXPECT_EQ(render("ok{% if x %}{{ raise_exception('no') }}{% endif %}", R"({"x": false})"), "ok");
}

TEST(JinjaErrors, using_an_undefined_value_beyond_printing_it_fails_the_render) {
  EXPECT_EQ(render("\n{{ missing.attr }}"),
            "ERROR: t line 2: 'missing' is undefined (looking up '.attr')");
  EXPECT_EQ(render("{{ messages[0]['role'] }}", R"({"messages": []})"),
            "ERROR: t line 1: 'index 0' is undefined");
  EXPECT_EQ(render("{{ 'a' + missing }}"), "ERROR: t line 1: 'missing' is undefined");
}

TEST(JinjaErrors, type_errors_fail_the_render_with_the_line) {
  EXPECT_EQ(render("{{ 'a' + 1 }}"),
            "ERROR: t line 1: unsupported operand types for +: 'str' and 'int'");
  EXPECT_EQ(render("x\n{% for c in 5 %}{% endfor %}"),
            "ERROR: t line 2: 'int' object is not iterable");
  EXPECT_EQ(render("{{ 1 // 0 }}"), "ERROR: t line 1: integer division or modulo by zero");
  EXPECT_EQ(render("{% set n = 1 %}{% set n.a = 2 %}"),
            "ERROR: t line 1: cannot assign attribute 'a' on 'n': it is a int, not a namespace");
}

TEST(JinjaErrors, deep_nesting_is_refused_rather_than_overflowing_the_stack) {
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_EQ(parse_error(deep), "t line 1: template nests too deeply");
  std::string nots = "{{ " + std::string(100, ' ') + "not not not not not not not not 1 }}";
  EXPECT_EQ(render(nots), "True");
  std::string ifs;
  for (int i = 0; i < 300; ++i) ifs += "{% if true %}";
  EXPECT_EQ(parse_error(ifs), "t line 1: template nests too deeply");
}

TEST(JinjaErrors, runaway_macro_recursion_is_stopped) {
  std::string out = render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(out, "ERROR: t line 1: macro 'f': recursion too deep");
}

TEST(JinjaErrors, values_nested_deep_or_holding_themselves_neither_overflow_the_stack) {
  // A GGUF template is input too. Built in a loop, a list 300,000 deep was freed recursively at
  // the end of the render (SIGSEGV); a namespace holding itself sent tojson round forever.
  auto nest = [](int levels) {
    return "{% set ns = namespace(v=[]) %}{% for i in range(" + std::to_string(levels) +
           ") %}{% set ns.v = [ns.v] %}{% endfor %}";
  };
  EXPECT_EQ(render(nest(300'000) + "x"), "x");
  const std::string deep = nest(2000);
  const std::string limit = "a value nests deeper than 1000 levels (limit 1000), or holds itself";
  EXPECT_NE(render(deep + "{{ ns.v|tojson }}").find(limit), std::string::npos);
  EXPECT_NE(render(deep + "{{ ns.v }}").find(limit), std::string::npos);
  EXPECT_NE(render(deep + "{{ ns.v == ns.v }}").find(limit), std::string::npos);
  const std::string self = "{% set ns = namespace(a=1) %}{% set ns.self = ns %}";
  EXPECT_NE(render(self + "{{ ns|tojson }}").find(limit), std::string::npos);
  EXPECT_NE(render(self + "{{ ns }}").find(limit), std::string::npos);
  EXPECT_EQ(render(self + "{{ ns.self.self.a }}"), "1");
}

// A value freed after its thread's free queue is gone (a static value at exit, here a
// thread_local made before the queue) is deleted directly. Under ASan, queuing it instead was a
// heap-use-after-free at exit (jinja_fuzz's static context failed every run that way).
TEST(JinjaValues, a_value_outliving_the_threads_free_queue_is_still_freed) {
  std::thread([] {
    struct Holder {
      Value v = Value(ValueList{Value(ValueList{Value(1)})});
    };
    thread_local Holder holder;  // constructed before the queue, so destroyed after it
    EXPECT_EQ(render("{% set ns = namespace(a=[1]) %}{{ ns.a[0] }}"), "1");  // uses the queue
    EXPECT_TRUE(holder.v.is_list());
  }).join();
}

}  // namespace
}  // namespace ember::text::jinja::testing
