// jinja interpreter: filters and the string/dict methods templates call.
// Expected strings are what python3-jinja2 renders for the same source and context (configured as
// Hugging Face does: trim_blocks, lstrip_blocks, loopcontrols, json.dumps tojson).
#include "jinja_test_util.h"

namespace ember::text::jinja::testing {
namespace {

TEST(JinjaFilters, string_filters) {
  EXPECT_EQ(render("[{{ '  pad \\n' | trim }}] [{{ 'xxhixx' | trim('x') }}] {{ 'MiXed' | upper }} "
                   "{{ 'MiXed' | lower }} {{ 'hELLO wORLD' | capitalize }} {{ 'hello wide-world "
                   "(x)' | title }}"),
            "[pad] [hi] MIXED mixed Hello world Hello Wide-World (X)");
  EXPECT_EQ(render("{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 42 | "
                   "string ~ '!' }} {{ '<b>' | safe }}"),
            "a+b+c bba 42! <b>");
  EXPECT_EQ(render("{{ 'line1\\nline2\\n\\nline4' | indent(2) }}|{{ 'a\\nb' | indent(3, true) "
                   "}}|{{ 'a\\n\\nb' | indent(2, blank=true) }}"),
            "line1\n  line2\n\n  line4|   a\n   b|a\n  \n  b");
}

TEST(JinjaFilters, trim_strips_unicode_whitespace) {
  EXPECT_EQ(render("[{{ s | trim }}] [{{ s.strip() }}]", R"({"s": " 　 x  \n"})"), "[x] [x]");
}

TEST(JinjaFilters, sequence_filters) {
  EXPECT_EQ(render("{{ xs | length }} {{ 'héllo' | length }} {{ d | count }} {{ xs | first }} {{ "
                   "xs | last }} {{ xs | join(', ') }} {{ xs | join }} {{ xs | reverse | list }} "
                   "{{ 'abc' | reverse }}",
                   R"({"xs": [3, 1, 2], "d": {"a": 1}})"),
            "3 5 1 3 2 3, 1, 2 312 [2, 1, 3] cba");
  EXPECT_EQ(
      render("{{ ['b', 'A', 'a', 'C'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ ['b', 'A', "
             "'a'] | unique | list }} {{ 'ab' | list }} {{ [[1, 2], [3]] | first | last }}"),
      "['A', 'a', 'b', 'C'] [3, 2, 1] ['b', 'A'] ['a', 'b'] 2");
  EXPECT_EQ(render("{{ [1, 2, 3, 4, 5] | batch(2) | list }} {{ [1, 2, 3] | batch(2, 0) | list }} "
                   "{{ [1, 2, 3] | sum }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }}"),
            "[[1, 2], [3, 4], [5]] [[1, 2], [3, 0]] 6 1 3");
  EXPECT_EQ(render("{{ d | dictsort }} {{ d | dictsort(by='value') }} {{ d | items | list }}",
                   R"({"d": {"b": 1, "a": 2}})"),
            "[('a', 2), ('b', 1)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)]");
}

TEST(JinjaFilters, attribute_filters_select_and_map) {
  EXPECT_EQ(
      render(
          "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | "
          "join(',') }}",
          R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"),
      "Hi");
  EXPECT_EQ(
      render(
          "{{ messages | rejectattr('role', 'equalto', 'system') | map(attribute='role') | list }}",
          R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"),
      "['user', 'assistant']");
  EXPECT_EQ(
      render(
          "{{ messages | map(attribute='role') | map('upper') | join(' ') }} {{ [0, 1, '', 'x'] | "
          "select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }}",
          R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})"),
      "SYSTEM USER ASSISTANT [1, 'x'] [2, 4]");
  EXPECT_EQ(
      render("{{ xs | selectattr('tool_calls') | list | length }} {{ xs | sort(attribute='n') | "
             "map(attribute='n') | list }} {{ xs | join('/', attribute='n') }}",
             R"({"xs": [{"n": 2, "tool_calls": [1]}, {"n": 1}]})"),
      "1 [1, 2] 2/1");
}

TEST(JinjaFilters, default_replaces_undefined_and_optionally_falsy) {
  EXPECT_EQ(render("[{{ missing | default('dflt') }}] [{{ '' | default('dflt') }}] [{{ '' | "
                   "default('dflt', true) }}] [{{ none | d('x') }}] [{{ m.nope | d(7) }}]",
                   R"({"m": {}})"),
            "[dflt] [] [dflt] [None] [7]");
}

TEST(JinjaFilters, number_filters) {
  EXPECT_EQ(render("{{ '42' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ 3.9 | int }} {{ '2.5' | "
                   "float }} {{ 3 | float }} {{ -3 | abs }} {{ -2.5 | abs }}"),
            "42 0 5 3 2.5 3.0 3 2.5");
  EXPECT_EQ(render("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | "
                   "round(method='ceil') }} {{ 2.9 | round(0, 'floor') }} {{ 7 | round }}"),
            "2.0 4.0 2.57 3.0 2.0 7");
  // Past int64 (Python would give a big int) the default comes back, never undefined behaviour.
  EXPECT_EQ(render("{{ 1e30 | int }} {{ '1e30' | int(7) }} {{ 1e999 | int(1) }}"), "0 7 1");
}

TEST(JinjaFilters, tojson_matches_json_dumps_with_ensure_ascii_false) {
  EXPECT_EQ(
      render(
          "{{ x | tojson }}",
          R"({"x": {"name": "f", "args": {"q": "naïve \"quoted\"\n", "n": [1, 2.5, true, null]}, "empty": {}, "e2": []}})"),
      "{\"name\": \"f\", \"args\": {\"q\": \"naïve \\\"quoted\\\"\\n\", \"n\": [1, 2.5, true, "
      "null]}, \"empty\": {}, \"e2\": []}");
  EXPECT_EQ(render("{{ x | tojson(indent=2) }}",
                   R"({"x": {"a": [1, {"b": null}], "c": "日本", "d": [], "e": {}}})"),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": \"日本\",\n  "
            "\"d\": [],\n  \"e\": {}\n}");
  EXPECT_EQ(render("{{ 'tab\\there' | tojson }} {{ 1.0 | tojson }} {{ [] | tojson(indent=4) }}"),
            "\"tab\\there\" 1.0 []");
}

TEST(JinjaMethods, string_methods) {
  EXPECT_EQ(render("[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxaxx'.strip('x') "
                   "}}][{{ '\\n\\nbody'.lstrip('\\n') }}]",
                   R"({"s": "  mid  "})"),
            "[mid][mid  ][  mid][a][body]");
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} "
                   "{{ 'x</think>y</think>z'.split('</think>')[-1] }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] z");
  EXPECT_EQ(
      render("{{ s.startswith('<tool') }} {{ s.endswith('>') }} {{ s.startswith(('x', '<')) }} {{ "
             "'Hello World'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }}",
             R"({"s": "<tool_response>"})"),
      "True True True HELLO WORLD hello Hello World");
  EXPECT_EQ(render("{{ 'a-b'.replace('-', '_') }} {{ '{} and {}'.format(1, 'two') }} {{ "
                   "'{0}{0}{name}'.format('x', name='y') }} {{ 'hello'.find('l') }} {{ "
                   "'hello'.find('z') }} {{ '日本語'.find('語') }} {{ ', '.join(['a', 'b']) }}"),
            "a_b 1 and two xxy 2 -1 2 a, b");
}

TEST(JinjaMethods, dict_methods) {
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d.keys() | list "
                   "}} {{ d.values() | list }} {{ d.items() | list }}",
                   R"({"d": {"a": 1, "b": [2]}})"),
            "1 None dflt ['a', 'b'] [1, [2]] [('a', 1), ('b', [2])]");
}

}  // namespace
}  // namespace ember::text::jinja::testing
