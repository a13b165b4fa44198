// jinja interpreter: expressions (literals, operators, access, slicing, tests, globals).
// Expected strings are what python3-jinja2 renders for the same source and context (configured as
// Hugging Face does: trim_blocks, lstrip_blocks, loopcontrols, json.dumps tojson).
#include "jinja_test_util.h"

namespace ember::text::jinja::testing {
namespace {

TEST(JinjaExpressions, literals_print_like_python) {
  EXPECT_EQ(render("{{ 'it''s' }} {{ \"a\\tb\\n\" }} {{ 42 }} {{ 1.5 }} {{ 2.0 }} {{ true }} {{ "
                   "False }} {{ none }} {{ None }}"),
            "its a\tb\n 42 1.5 2.0 True False None None");
  EXPECT_EQ(render("{{ [1, 'a', none, true] }} {{ {'k': 'v', 'n': 1} }} {{ (1, 'x') }} {{ (1,) }}"),
            "[1, 'a', None, True] {'k': 'v', 'n': 1} (1, 'x') (1,)");
  EXPECT_EQ(render("{{ '\\u00e9\\x41\\\\' }}"), "éA\\");
}

TEST(JinjaExpressions, arithmetic_follows_python) {
  EXPECT_EQ(render("{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ "
                   "7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 + 2.5 }} {{ 10 / 4 }}"),
            "10 -3 21 3.5 3 -4 1 2 1024 3.5 2.5");
  EXPECT_EQ(render("{{ 'ab' + 'cd' }} {{ [1] + [2] }} {{ 'ab' * 3 }} {{ -x }} {{ 1 + 2 * 3 }} {{ "
                   "(1 + 2) * 3 }}",
                   R"({"x": 4})"),
            "abcd [1, 2] ababab -4 7 9");
}

TEST(JinjaExpressions, tilde_concatenates_as_strings) {
  EXPECT_EQ(render("{{ 'n=' ~ 3 ~ ' ' ~ none ~ '|' ~ missing ~ '|' ~ [1] }}"), "n=3 None||[1]");
}

TEST(JinjaExpressions, comparisons_and_membership) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 2 < 3 }} {{ 3 <= 2 }} {{ 'b' > 'a' }} {{ 1 "
                   "< 2 < 3 }} {{ 3 > 2 > 2 }}"),
            "True True True False True True False");
  EXPECT_EQ(render("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in d }} {{ 'z' not in d }} {{ "
                   "3 not in [1] }}",
                   R"({"d": {"k": 1}})"),
            "True True True True True");
}

TEST(JinjaExpressions, boolean_operators_short_circuit_and_return_operands) {
  EXPECT_EQ(
      render("{{ 0 or 'fallback' }} {{ 'a' and 'b' }} {{ '' and x.y }} {{ not 0 }} {{ not [1] }}"),
      "fallback b  True False");
  EXPECT_EQ(render("{{ x is defined and x.y is defined }}"), "False");
}

TEST(JinjaExpressions, conditional_expression_without_else_is_undefined) {
  EXPECT_EQ(render("[{{ 'yes' if c else 'no' }}][{{ 'only' if c }}]", R"({"c": false})"), "[no][]");
  EXPECT_EQ(render("[{{ 'yes' if c else 'no' }}]", R"({"c": [0]})"), "[yes]");
}

TEST(JinjaExpressions, attribute_and_item_access) {
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} [{{ m.missing }}] {{ m.missing is undefined }} "
                   "{{ xs[0] }} {{ xs[-1] }} [{{ xs[9] }}] {{ xs.1 }}",
                   R"({"m": {"role": "user", "content": "c"}, "xs": [10, 20, 30]})"),
            "user c [] True 10 30 [] 20");
  EXPECT_EQ(
      render(
          "{{ s[0] }}{{ s[-1] }} {{ messages[0].role }} {{ messages[-1]['content'] }}",
          R"({"s": "日本語", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"),
      "日語 system Yo");
}

TEST(JinjaExpressions, slicing_follows_python) {
  EXPECT_EQ(render("{{ xs[1:] }} {{ xs[:2] }} {{ xs[::-1] }} {{ xs[::2] }} {{ xs[-2:] }} {{ "
                   "xs[1:-1] }} {{ xs[5:] }} {{ xs[:-9] }}",
                   R"({"xs": [1, 2, 3, 4]})"),
            "[2, 3, 4] [1, 2] [4, 3, 2, 1] [1, 3] [3, 4] [2, 3] [] []");
  EXPECT_EQ(render("{{ 'héllo'[::-1] }} {{ 'hello'[1:3] }} {{ 'abc'[-1::-2] }}"), "olléh el ca");
}

TEST(JinjaExpressions, tests_classify_values) {
  EXPECT_EQ(render("{{ x is defined }} {{ y is undefined }} {{ n is none }} {{ 'a' is string }} {{ "
                   "d is mapping }} {{ xs is iterable }} {{ 'a' is iterable }} {{ 3 is number }} "
                   "{{ 1.5 is number }} {{ xs is sequence }} {{ t is boolean }} {{ t is true }} {{ "
                   "t is false }} {{ 4 is even }} {{ 3 is odd }}",
                   R"({"x": 1, "n": null, "d": {}, "xs": [1], "t": true})"),
            "True True True True True True True True True True True True False True True");
  EXPECT_EQ(
      render(
          "{{ x is not none }} {{ not x is none }} {{ 6 is divisibleby 3 }} {{ 'a' is equalto 'a' "
          "}} {{ 'a' is eq('b') }} {{ 1 is sameas true }} {{ d is string }} {{ 'x' is in ['x'] }}",
          R"({"x": 0, "d": {}})"),
      "True True True True False False False True");
}

TEST(JinjaExpressions, globals_range_and_namespace) {
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(10, 0, -3) | list }} "
                   "{{ range(0) | list }} {% for i in range(2) %}{{ i }}{% endfor %}"),
            "[0, 1, 2] [1, 2, 3] [10, 7, 4, 1] [] 01");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{{ ns.a }} {{ ns.b is defined }}"), "1 False");
  EXPECT_EQ(render("{{ dict(a=1, b='x') }}"), "{'a': 1, 'b': 'x'}");
}

}  // namespace
}  // namespace ember::text::jinja::testing
