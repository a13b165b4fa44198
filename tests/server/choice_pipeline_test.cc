// The per-choice text pipeline (server/choice_pipeline.h) on a fixture vocabulary: generated
// token ids in, what the client is shown out, through the detokenizer, the stop strings and
// the tool-call parser.
#include "server/choice_pipeline.h"

#include <gtest/gtest.h>

#include "server/fixture_codec.h"

namespace ember::server {
namespace {

const text::TextCodec& codec() {
  return testing::fixture_codec();
}

std::vector<int32_t> ids_of(std::string_view s) {
  return codec().tokenizer().encode(s, false, false);
}

// Everything a choice shows for `text` generated token by token, then finished.
struct Shown {
  std::string content;
  std::vector<ToolCallOut> calls;
  std::vector<TokenLogprob> lps;
  int stopped_at = -1;  // the token whose push reported the stop
};

void take(Shown& run, ChoicePipeline::Out out) {
  run.content += out.content;
  for (auto& c : out.calls) run.calls.push_back(std::move(c));
  if (out.logprob) run.lps.push_back(std::move(*out.logprob));
}

Shown run_through(ChoicePipeline& p, std::string_view text) {
  Shown run;
  const auto ids = ids_of(text);
  for (size_t i = 0; i < ids.size(); ++i) {
    ChoicePipeline::Out out = p.push({ids[i], -0.25f, {}});
    if (out.stopped) {
      EXPECT_EQ(run.stopped_at, -1) << "a choice stops once";
      run.stopped_at = static_cast<int>(i);
    }
    take(run, std::move(out));
  }
  take(run, p.finish());
  return run;
}

TEST(ChoicePipeline, without_stops_or_tools_the_text_comes_out_whole) {
  ChoicePipeline p(codec(), {}, false, false);
  Shown run = run_through(p, "Hello, world. <tool_call>{\"name\":\"f\"}</tool_call>");
  EXPECT_EQ(run.content, "Hello, world. <tool_call>{\"name\":\"f\"}</tool_call>");
  EXPECT_TRUE(run.calls.empty());
  EXPECT_TRUE(run.lps.empty());  // not asked for
  EXPECT_EQ(run.stopped_at, -1);
  EXPECT_FALSE(p.stopped_by_string());
  EXPECT_FALSE(p.made_tool_calls());
}

TEST(ChoicePipeline, a_stop_string_across_tokens_ends_the_choice_where_it_completes) {
  const std::string text = "one two three four";
  ASSERT_GT(ids_of("one two th").size(), 1u);
  ChoicePipeline p(codec(), {"two three"}, false, true);
  Shown run = run_through(p, text);
  EXPECT_EQ(run.content, "one ");
  EXPECT_TRUE(p.stopped_by_string());
  // The token that completed "two three" reported the stop; what came after gave nothing,
  // not even a log-probability (the engine was still finishing its step).
  const auto ids = ids_of(text);
  size_t completes = 0;
  for (std::string seen; completes < ids.size(); ++completes) {
    seen += codec().token_text(ids[completes]);
    if (seen.find("two three") != std::string::npos) break;
  }
  EXPECT_EQ(run.stopped_at, static_cast<int>(completes));
  EXPECT_EQ(run.lps.size(), completes + 1);
  EXPECT_EQ(p.push({ids[0], 0.f, {}}).content, "");
}

TEST(ChoicePipeline, text_that_may_start_a_stop_string_is_held_then_flushed_at_the_end) {
  ChoicePipeline p(codec(), {"two three"}, false, false);
  std::string shown;
  for (int32_t id : ids_of("one two")) shown += p.push({id, 0.f, {}}).content;
  EXPECT_EQ(shown, "one ");  // "two" may begin the stop string
  ChoicePipeline::Out tail = p.finish();
  EXPECT_EQ(tail.content, "two");
  EXPECT_FALSE(tail.stopped);
  EXPECT_FALSE(p.stopped_by_string());
}

TEST(ChoicePipeline, a_tool_call_comes_out_as_a_call_with_an_id_not_as_text) {
  ChoicePipeline p(codec(), {}, true, false);
  Shown run = run_through(
      p,
      "Sure.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
      "</tool_call>");
  EXPECT_EQ(run.content, "Sure.");
  ASSERT_EQ(run.calls.size(), 1u);
  EXPECT_EQ(run.calls[0].name, "get_weather");
  EXPECT_EQ(run.calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_TRUE(run.calls[0].id.starts_with("call_")) << run.calls[0].id;
  EXPECT_EQ(run.calls[0].id.size(), 5u + 24u);
  EXPECT_TRUE(p.made_tool_calls());
}

TEST(ChoicePipeline, two_calls_get_two_ids) {
  ChoicePipeline p(codec(), {}, true, false);
  Shown run = run_through(p,
                          "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
                          "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(run.calls.size(), 2u);
  EXPECT_EQ(run.calls[0].name, "a");
  EXPECT_EQ(run.calls[1].name, "b");
  EXPECT_NE(run.calls[0].id, run.calls[1].id);
}

TEST(ChoicePipeline, a_stop_string_applies_before_the_tool_call_parser) {
  ChoicePipeline p(codec(), {"<tool_call>"}, true, false);
  Shown run = run_through(p, "Hi<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>");
  EXPECT_EQ(run.content, "Hi");
  EXPECT_TRUE(run.calls.empty());
  EXPECT_TRUE(p.stopped_by_string());
  EXPECT_FALSE(p.made_tool_calls());
}

TEST(ChoicePipeline, log_probabilities_name_each_token_and_its_alternatives) {
  ChoicePipeline p(codec(), {}, false, true);
  const auto ids = ids_of("ab cd");
  ASSERT_GE(ids.size(), 2u);
  ChoicePipeline::Out out = p.push({ids[0], -0.5f, {{ids[1], -1.5f}}});
  ASSERT_TRUE(out.logprob);
  EXPECT_EQ(out.logprob->token, codec().token_text(ids[0]));
  EXPECT_FLOAT_EQ(out.logprob->logprob, -0.5f);
  ASSERT_EQ(out.logprob->top.size(), 1u);
  EXPECT_EQ(out.logprob->top[0].first, codec().token_text(ids[1]));
  EXPECT_FLOAT_EQ(out.logprob->top[0].second, -1.5f);
  EXPECT_FALSE(p.finish().logprob);  // the end is no token
}

}  // namespace
}  // namespace ember::server
