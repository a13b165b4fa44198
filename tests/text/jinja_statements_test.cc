// jinja interpreter: statements (if, for, set, namespace, macro, filter blocks, loop control).
// Expected strings are what python3-jinja2 renders for the same source and context (configured as
// Hugging Face does: trim_blocks, lstrip_blocks, loopcontrols, json.dumps tojson).
#include "jinja_test_util.h"

namespace ember::text::jinja::testing {
namespace {

TEST(JinjaStatements, if_elif_else_picks_the_first_true_branch) {
  EXPECT_EQ(
      render("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", R"({"x": 1})"),
      "one");
  EXPECT_EQ(
      render("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", R"({"x": 2})"),
      "two");
  EXPECT_EQ(
      render("{% if x == 1 %}one{% elif x == 2 %}two{% else %}many{% endif %}", R"({"x": 7})"),
      "many");
  EXPECT_EQ(render("{% if missing %}a{% else %}b{% endif %}"), "b");
}

TEST(JinjaStatements, for_exposes_loop_variables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ "
                   "loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
                   R"({"xs": ["a", "b", "c"]})"),
            "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }}|{% endfor %}",
                   R"({"xs": [1, 2, 3]})"),
            "<1>2|1<2>3|2<3>|");
}

TEST(JinjaStatements, for_else_runs_when_nothing_was_iterated) {
  EXPECT_EQ(render("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", R"({"xs": []})"),
            "empty");
  EXPECT_EQ(render("{% for x in xs if x > 5 %}{{ x }}{% else %}none big{% endfor %}",
                   R"({"xs": [1, 2]})"),
            "none big");
  EXPECT_EQ(
      render("{% for x in missing %}{{ x }}{% else %}undefined iterates as empty{% endfor %}"),
      "undefined iterates as empty");
}

TEST(JinjaStatements, for_unpacks_tuples_and_filters_inline) {
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }},{% endfor %}",
                   R"({"d": {"b": 1, "a": 2}})"),
            "b=1,a=2,");
  EXPECT_EQ(
      render("{% for k, v in d | items %}{{ k }}={{ v }},{% endfor %}", R"({"d": {"x": true}})"),
      "x=True,");
  EXPECT_EQ(
      render("{% for x in xs if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }} {% endfor %}",
             R"({"xs": [1, 2, 3, 4, 5]})"),
      "1:1/3 3:2/3 5:3/3 ");
  EXPECT_EQ(render("{% for k in d %}{{ k }}{% endfor %}", R"({"d": {"p": 1, "q": 2}})"), "pq");
  EXPECT_EQ(render("{% for c in 'héllo' %}[{{ c }}]{% endfor %}"), "[h][é][l][l][o]");
}

TEST(JinjaStatements, break_and_continue_control_the_loop) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 "
                   "%}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
}

TEST(JinjaStatements, set_in_a_loop_body_does_not_leak_but_namespace_does) {
  EXPECT_EQ(render("{% set y = 1 %}{% for x in [1, 2] %}{{ y }}{% if loop.first %}{% set y = 5 "
                   "%}{% endif %}{{ y }};{% endfor %}{{ y }}"),
            "15;11;1");
  EXPECT_EQ(
      render("{% set ns = namespace(total=0, seen=none) %}{% for x in [1, 2, 3] %}{% set ns.total "
             "= ns.total + x %}{% set ns.seen = x %}{% endfor %}{{ ns.total }} {{ ns.seen }}"),
      "6 3");
  EXPECT_EQ(render("{% if true %}{% set z = 'leaks from if' %}{% endif %}{{ z }}"),
            "leaks from if");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(
      render(
          "{% set messages = messages[1:] %}{{ messages | length }}",
          R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"),
      "2");
}

TEST(JinjaStatements, set_block_captures_rendered_text) {
  EXPECT_EQ(render("{% set greeting %}Hello {{ name }}!{% endset %}[{{ greeting | upper }}]",
                   R"({"name": "Ann"})"),
            "[HELLO ANN!]");
}

TEST(JinjaStatements, macros_take_positional_keyword_and_default_arguments) {
  EXPECT_EQ(render("{% macro tag(name, body='x', close=true) %}<{{ name }}>{{ body }}{% if close "
                   "%}</{{ name }}>{% endif %}{% endmacro %}{{ tag('a') }}|{{ tag('b', 'y') }}|{{ "
                   "tag('c', close=false) }}"),
            "<a>x</a>|<b>y</b>|<c>x");
  EXPECT_EQ(render("{% macro shout(s) %}{{ s | upper }}{% endmacro %}{% set g = 'global' %}{{ "
                   "shout(g) ~ '!' }}"),
            "GLOBAL!");
}

TEST(JinjaStatements, filter_block_applies_filters_to_its_body) {
  EXPECT_EQ(
      render("{% filter upper | trim %}  hello {{ name }}  {% endfilter %}.", R"({"name": "bob"})"),
      "HELLO BOB.");
}

TEST(JinjaStatements, generation_block_renders_its_body_unchanged) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

}  // namespace
}  // namespace ember::text::jinja::testing
