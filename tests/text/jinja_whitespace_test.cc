// Whitespace control as Hugging Face configures Jinja2 for chat templates (trim_blocks=True,
// lstrip_blocks=True). Expected strings were checked against python3-jinja2.
#include "jinja_test_util.h"

namespace ember::text::jinja::testing {
namespace {

TEST(JinjaWhitespace, trim_blocks_removes_the_newline_after_a_block_tag) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
}

TEST(JinjaWhitespace, trim_blocks_does_not_apply_to_expression_tags) {
  EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb");
}

TEST(JinjaWhitespace, lstrip_blocks_removes_indentation_before_a_block_tag) {
  EXPECT_EQ(render("<\n    {% if true %}\n    x\n    {% endif %}\n>"), "<\n    x\n>");
}

TEST(JinjaWhitespace, lstrip_blocks_keeps_text_before_a_tag_on_the_same_line) {
  EXPECT_EQ(render("a  {% if true %}b{% endif %}"), "a  b");
}

TEST(JinjaWhitespace, minus_strips_all_whitespace_including_newlines) {
  EXPECT_EQ(render("a  \n\n  {%- if true -%}  \n\n  b  \n {{- 'c' -}} \n d{% endif %}"), "abcd");
  EXPECT_EQ(render("x\n  {{- 'y' }}"), "xy");
}

TEST(JinjaWhitespace, plus_disables_lstrip_and_trim) {
  EXPECT_EQ(render("  {%+ if true +%}\nx{% endif %}"), "  \nx");
}

TEST(JinjaWhitespace, comments_are_dropped_and_trim_like_blocks) {
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
  EXPECT_EQ(render("a {#- note -#} b"), "ab");
}

TEST(JinjaWhitespace, one_trailing_newline_of_the_source_is_dropped) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
}

TEST(JinjaWhitespace, loop_body_indentation_is_stripped_per_iteration) {
  const char* src =
      "{% for m in xs %}\n"
      "    {% if m %}\n"
      "        [{{ m }}]\n"
      "    {% endif %}\n"
      "{% endfor %}\n";
  EXPECT_EQ(render(src, R"({"xs": [1, 0, 2]})"), "        [1]\n        [2]\n");
}

}  // namespace
}  // namespace ember::text::jinja::testing
