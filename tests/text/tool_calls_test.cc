// Tool-call formats: parsing recorded model outputs (whole and streamed in small pieces),
// malformed calls returned as content, format detection, and the forced-call grammar.
#include "text/tool_calls.h"

#include <gtest/gtest.h>

namespace ember::text {
namespace {

using json = nlohmann::ordered_json;

ToolCallParser::Out parse_in_pieces(ToolFormat f, std::string_view text, size_t piece) {
  ToolCallParser p(f);
  ToolCallParser::Out all;
  auto take = [&](ToolCallParser::Out o) {
    all.content += o.content;
    for (auto& c : o.calls) all.calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += piece) take(p.push(text.substr(i, piece)));
  take(p.finish());
  return all;
}

// Every output is checked whole and streamed 1, 3 and 7 bytes at a time: same result.
void expect_parse(ToolFormat f, std::string_view text, const std::string& content,
                  const std::vector<std::pair<std::string, std::string>>& calls) {
  for (size_t piece : {text.size() + 1, size_t{1}, size_t{3}, size_t{7}}) {
    auto out = parse_in_pieces(f, text, piece);
    EXPECT_EQ(out.content, content) << "piece " << piece;
    ASSERT_EQ(out.calls.size(), calls.size()) << "piece " << piece;
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(out.calls[i].name, calls[i].first);
      EXPECT_EQ(json::parse(out.calls[i].arguments), json::parse(calls[i].second));
    }
  }
}

// Recorded from Qwen2.5-0.5B-Instruct and Hermes-style prompts.
TEST(ToolCalls, hermes_calls_are_parsed_and_surrounding_text_is_content) {
  expect_parse(ToolFormat::Hermes,
               "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
               "</tool_call>",
               "", {{"get_weather", R"({"city":"Paris"})"}});
  expect_parse(ToolFormat::Hermes,
               "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
               "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
               "Let me check.\n", {{"a", "{}"}, {"b", R"({"x":[1,2]})"}});
  expect_parse(ToolFormat::Hermes, "No tools needed: 1 < 2 and <b>bold</b>.",
               "No tools needed: 1 < 2 and <b>bold</b>.", {});
}

TEST(ToolCalls, malformed_hermes_calls_come_back_as_content_byte_for_byte) {
  const std::string bad_json =
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call>";
  expect_parse(ToolFormat::Hermes, bad_json, bad_json, {});
  const std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call> done";
  expect_parse(ToolFormat::Hermes, no_name, no_name, {});
  const std::string unclosed = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1";
  expect_parse(ToolFormat::Hermes, unclosed, unclosed, {});
  const std::string args_not_object = "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>";
  expect_parse(ToolFormat::Hermes, args_not_object, args_not_object, {});
  // A call cut off by max_tokens before its closing tag still counts when its JSON is whole.
  expect_parse(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}", "",
               {{"f", "{}"}});
}

TEST(ToolCalls, hermes_streaming_holds_back_only_a_possible_marker) {
  ToolCallParser p(ToolFormat::Hermes);
  EXPECT_EQ(p.push("Hello <tool").content, "Hello ");
  EXPECT_EQ(p.push("s> are fun").content, "<tools> are fun");
  EXPECT_EQ(p.finish().content, "");
}

// Recorded from Llama-3.2-1B-Instruct.
TEST(ToolCalls, llama3_json_answers_are_calls) {
  expect_parse(ToolFormat::Llama3,
               "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 3}}", "",
               {{"get_weather", R"({"city":"Oslo","days":3})"}});
  expect_parse(ToolFormat::Llama3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}", "",
               {{"f", "{}"}});
  expect_parse(
      ToolFormat::Llama3,
      "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"q\": 1}}", "",
      {{"a", "{}"}, {"b", R"({"q":1})"}});
  expect_parse(ToolFormat::Llama3, "The weather is fine.", "The weather is fine.", {});
  const std::string broken = "{\"name\": \"get_weather\", \"parameters\": {\"city\": ";
  expect_parse(ToolFormat::Llama3, broken, broken, {});
  expect_parse(ToolFormat::Llama3, "{\"answer\": 42}", "{\"answer\": 42}", {});
  // Found by tool_calls_fuzz: the tag alone (cut off by max_tokens, or the model ending there)
  // was taken as zero calls, and the text was lost.
  expect_parse(ToolFormat::Llama3, "<|python_tag|>", "<|python_tag|>", {});
  expect_parse(ToolFormat::Llama3, "<|python_tag|>  ", "<|python_tag|>  ", {});
}

// Recorded from Mistral-7B-Instruct-v0.3.
TEST(ToolCalls, mistral_tool_calls_arrays_are_calls) {
  expect_parse(ToolFormat::Mistral,
               "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, "
               "{\"name\": \"get_time\", \"arguments\": {}}]",
               "", {{"get_weather", R"({"city":"Rome"})"}, {"get_time", "{}"}});
  expect_parse(ToolFormat::Mistral, "[{\"name\": \"f\", \"arguments\": {\"a\": true}}]", "",
               {{"f", R"({"a":true})"}});
  expect_parse(ToolFormat::Mistral, "[1, 2, 3] are numbers", "[1, 2, 3] are numbers", {});
  const std::string broken = "[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {";
  expect_parse(ToolFormat::Mistral, broken, broken, {});
}

TEST(ToolCalls, the_format_is_chosen_from_the_template) {
  EXPECT_EQ(tool_format_for_template("{{ '<tool_call>' }}"), ToolFormat::Hermes);
  EXPECT_EQ(tool_format_for_template("{{ '[TOOL_CALLS]' }}"), ToolFormat::Mistral);
  EXPECT_EQ(tool_format_for_template("<|python_tag|>{{ x }}<|eot_id|>"), ToolFormat::Llama3);
  EXPECT_EQ(tool_format_for_template("{{ messages }}"), ToolFormat::Hermes);
  EXPECT_TRUE(template_renders_tools(chatml_tool_template()));
  EXPECT_FALSE(template_renders_tools("{{ messages }}"));
}

TEST(ToolCalls, the_forced_call_grammar_accepts_only_a_call_of_a_given_tool) {
  std::vector<ToolSpec> tools = {
      {"get_weather", json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},
                                      "required":["city"]})")},
      {"get_time", nullptr}};
  auto g = tool_call_grammar(ToolFormat::Hermes, tools);
  ASSERT_TRUE(g.ok()) << g.message();
  auto ok = [&](std::string_view s) {
    Machine m(*g);
    return m.step(s) && m.done();
  };
  const std::string good =
      "<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n</tool_call>";
  EXPECT_TRUE(ok(good));
  EXPECT_TRUE(ok("<tool_call>\n{\"name\":\"get_time\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(ok("<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}\n</tool_call>"));
  EXPECT_FALSE(ok("<tool_call>\n{\"name\":\"other\",\"arguments\":{}}\n</tool_call>"));
  // What the grammar produces, the parser reads back.
  auto parsed = parse_in_pieces(ToolFormat::Hermes, good, 5);
  ASSERT_EQ(parsed.calls.size(), 1u);
  EXPECT_EQ(parsed.calls[0].name, "get_weather");

  auto l = tool_call_grammar(ToolFormat::Llama3, tools);
  ASSERT_TRUE(l.ok());
  Machine m(*l);
  EXPECT_TRUE(m.step("{\"name\":\"get_time\",\"parameters\":{\"tz\":\"UTC\"}}") && m.done());

  auto bad = tool_call_grammar(
      ToolFormat::Hermes,
      {{"f",
        json::parse(R"({"type":"object","properties":{"d":{"type":"string","format":"date"}}})")}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(),
            "tool 'f' parameters: #/properties/d: the schema feature 'format' is not supported");
}

}  // namespace
}  // namespace ember::text
