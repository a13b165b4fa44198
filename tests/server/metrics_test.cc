#include "server/metrics.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "server/responses.h"
#include "server/server.h"
#include "server/sse.h"

namespace ember::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

TEST(Metrics, exposition_has_help_and_type_for_every_family_and_labelled_samples) {
  Metrics m;
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/v1/chat/completions", 200);
  m.count_request("/health", 503);
  m.add_prompt_tokens(12);
  m.add_generated_tokens(5);
  m.count_cancellation("client");
  MetricsSnapshot snap;
  snap.queue_depth = 3;
  snap.active_sequences = 2;
  snap.draining = true;
  std::string text = m.render(snap);
  EXPECT_TRUE(has_line(text, "# TYPE ember_http_requests_total counter"));
  EXPECT_TRUE(
      has_line(text, R"(ember_http_requests_total{route="/v1/chat/completions",status="200"} 2)"));
  EXPECT_TRUE(has_line(text, R"(ember_http_requests_total{route="/health",status="503"} 1)"));
  EXPECT_TRUE(has_line(text, "ember_prompt_tokens_total 12"));
  EXPECT_TRUE(has_line(text, "ember_generated_tokens_total 5"));
  EXPECT_TRUE(has_line(text, R"(ember_cancellations_total{cause="client"} 1)"));
  EXPECT_TRUE(has_line(text, R"(ember_cancellations_total{cause="shutdown"} 0)"));
  EXPECT_TRUE(has_line(text, "ember_queue_depth 3"));
  EXPECT_TRUE(has_line(text, "ember_active_sequences 2"));
  EXPECT_TRUE(has_line(text, "ember_draining 1"));
  EXPECT_EQ(text.back(), '\n');
}

TEST(Metrics, histogram_buckets_are_cumulative_and_end_with_inf) {
  Histogram h({0.1, 1});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5);
  std::string out;
  h.render(out, "x_seconds");
  EXPECT_TRUE(has_line(out, R"(x_seconds_bucket{le="0.1"} 1)"));
  EXPECT_TRUE(has_line(out, R"(x_seconds_bucket{le="1"} 2)"));
  EXPECT_TRUE(has_line(out, R"(x_seconds_bucket{le="+Inf"} 3)"));
  EXPECT_TRUE(has_line(out, "x_seconds_count 3"));
  EXPECT_TRUE(has_line(out, "x_seconds_sum 5.55"));
}

TEST(Metrics, label_values_are_escaped) {
  EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(Sse, event_is_one_data_line_and_a_blank_line) {
  std::string e = sse_event(nlohmann::json{{"text", "a\nb"}});
  EXPECT_EQ(e, "data: {\"text\":\"a\\nb\"}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

TEST(Sse, invalid_utf8_is_replaced_instead_of_throwing) {
  std::string bad = "ok\xE2\x82";  // a cut-off euro sign
  std::string e;
  EXPECT_NO_THROW(e = sse_event(nlohmann::json{{"t", bad}}));
  EXPECT_NE(e.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD
}

TEST(Responses, chat_stream_chunks_follow_openai_shapes) {
  ResponseContext c{Endpoint::Chat, "chatcmpl-1", 7, "m", true};
  auto role = chunk_role(c, 0);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["usage"].is_null());
  auto content = chunk_content(c, 0, "hi", nullptr);
  EXPECT_EQ(content["choices"][0]["delta"]["content"], "hi");
  EXPECT_TRUE(content["choices"][0]["finish_reason"].is_null());
  auto fin = chunk_final(c, 1, "length");
  EXPECT_EQ(fin["choices"][0]["index"], 1);
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  auto usage = chunk_usage(c, {3, 4});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(Responses, completion_response_carries_text_finish_reason_and_logprobs) {
  ResponseContext c{Endpoint::Completion, "cmpl-1", 7, "m", false};
  std::vector<TokenLogprob> lps{{"a", -0.5f, {{"a", -0.5f}, {"b", -1.f}}}, {"bc", -0.25f, {}}};
  auto r = full_response(c, {{0, "abc", {}, "stop", &lps}}, {2, 2});
  EXPECT_EQ(r["object"], "text_completion");
  EXPECT_EQ(r["choices"][0]["text"], "abc");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][0]["logprobs"]["tokens"], nlohmann::json({"a", "bc"}));
  EXPECT_EQ(r["choices"][0]["logprobs"]["text_offset"], nlohmann::json({0, 1}));
  EXPECT_EQ(r["usage"]["completion_tokens"], 2);
}

TEST(Responses, tool_calls_come_back_as_openai_tool_calls_or_legacy_function_call) {
  ResponseContext c{Endpoint::Chat, "chatcmpl-1", 7, "m", false};
  ToolCallOut call{"call_1", "get_weather", R"({"city":"Oslo"})"};
  auto r = full_response(c, {{0, "", {call}, "tool_calls", nullptr}}, {2, 2});
  const auto& m = r["choices"][0]["message"];
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m["tool_calls"][0]["type"], "function");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], R"({"city":"Oslo"})");
  auto head = chunk_tool_call(c, 0, 0, call, true, "");
  const auto& d = head["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(d["index"], 0);
  EXPECT_EQ(d["id"], "call_1");
  EXPECT_EQ(d["function"]["name"], "get_weather");
  EXPECT_EQ(d["function"]["arguments"], "");
  auto frag = chunk_tool_call(c, 0, 0, call, false, "{\"ci");
  EXPECT_FALSE(frag["choices"][0]["delta"]["tool_calls"][0].contains("id"));
  EXPECT_EQ(frag["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"ci");
  c.legacy_functions = true;
  auto legacy = full_response(c, {{0, "", {call}, "function_call", nullptr}}, {2, 2});
  EXPECT_EQ(legacy["choices"][0]["message"]["function_call"]["name"], "get_weather");
  EXPECT_FALSE(legacy["choices"][0]["message"].contains("tool_calls"));
}

TEST(Auth, constant_time_compare_matches_only_equal_strings) {
  EXPECT_TRUE(constant_time_equal("secret", "secret"));
  EXPECT_FALSE(constant_time_equal("secret", "secreT"));
  EXPECT_FALSE(constant_time_equal("secret", "secret2"));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_TRUE(constant_time_equal("", ""));
}

}  // namespace
}  // namespace ember::server
