// The OpenAI writers (server/openai_writers.h) without a socket: what each wire format sends,
// in which order, for the events of a generation.
#include "server/openai_writers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ember::server {
namespace {

using json = nlohmann::json;

ResponseContext ctx(Endpoint e, bool include_usage = false) {
  return {e, "id-1", 7, "m", include_usage, false};
}

// The JSON payloads of SSE pieces ("[DONE]" as a string).
std::vector<json> payloads(const std::vector<std::string>& pieces) {
  std::vector<json> out;
  for (const std::string& p : pieces) {
    EXPECT_TRUE(p.starts_with("data: ") && p.ends_with("\n\n")) << p;
    std::string body = p.substr(6, p.size() - 8);
    out.push_back(body == "[DONE]" ? json("[DONE]") : json::parse(body));
  }
  return out;
}

Finish finished(uint32_t n, worker::FinishReason reason = worker::FinishReason::Length) {
  Finish f;
  f.choices.assign(n, ChoiceEnd{reason, false, false});
  f.usage = {3, 2, 0};
  return f;
}

TEST(OpenAiWriters, chat_sse_streams_role_content_tool_call_final_usage_done_in_order) {
  auto w = make_openai_writer(ctx(Endpoint::Chat, true), true, false);
  ASSERT_TRUE(w->streaming());
  w->start(2, {});
  w->text(1, "hi", nullptr);
  w->text(0, "", nullptr);  // text still held back, no log-probability: nothing to send
  w->tool_call(0, {"call_1", "f", "{\"a\":1}"});
  Finish f = finished(2);
  f.choices[0] = {worker::FinishReason::Stop, false, true};
  w->finish(f);
  auto p = payloads(w->take_pieces());
  ASSERT_EQ(p.size(), 9u);
  EXPECT_EQ(p[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(p[1]["choices"][0]["index"], 1);
  EXPECT_EQ(p[2]["choices"][0]["delta"]["content"], "hi");
  EXPECT_EQ(p[3]["choices"][0]["delta"]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(p[4]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(p[5]["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(p[6]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(p[7]["usage"]["total_tokens"], 5);
  EXPECT_EQ(p[8], "[DONE]");
  EXPECT_TRUE(w->take_pieces().empty());  // taken once
}

TEST(OpenAiWriters, an_error_ends_a_stream_after_the_final_chunks_instead_of_the_usage) {
  auto w = make_openai_writer(ctx(Endpoint::Completion, true), true, false);
  w->start(1, {"Once"});  // echo: the prompt's text first
  Finish f = finished(1, worker::FinishReason::Cancelled);
  f.error = ApiError{ErrorKind::Draining, "bye", {}};
  w->finish(f);
  auto p = payloads(w->take_pieces());
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0]["choices"][0]["text"], "Once");
  EXPECT_EQ(p[1]["choices"][0]["finish_reason"], "cancelled");
  EXPECT_EQ(p[2]["error"]["code"], "shutting_down");
  EXPECT_EQ(p[3], "[DONE]");
}

TEST(OpenAiWriters, a_log_probability_alone_is_a_chunk_of_its_own) {
  auto w = make_openai_writer(ctx(Endpoint::Chat), true, true);
  w->start(1, {});
  TokenLogprob lp{"x", -0.5f, {}};
  w->text(0, "", &lp);
  auto p = payloads(w->take_pieces());
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1]["choices"][0]["logprobs"]["content"][0]["logprob"], -0.5);
}

TEST(OpenAiWriters, json_gathers_each_choice_and_answers_once_at_the_end) {
  auto w = make_openai_writer(ctx(Endpoint::Completion), false, true);
  ASSERT_FALSE(w->streaming());
  w->start(2, {"A", "B"});
  TokenLogprob lp{"b", -1.f, {}};
  w->text(0, "a", &lp);
  w->text(1, "c", &lp);
  w->text(0, "d", nullptr);
  EXPECT_TRUE(w->take_pieces().empty());
  EXPECT_FALSE(w->take_reply());
  Finish f = finished(2);
  f.choices[1] = {worker::FinishReason::Cancelled, true, false};  // a stop string: "stop"
  w->finish(f);
  auto reply = w->take_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, http::status::ok);
  auto j = json::parse(reply->body);
  EXPECT_EQ(j["choices"][0]["text"], "Aad");
  EXPECT_EQ(j["choices"][1]["text"], "Bc");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["logprobs"]["tokens"].size(), 1u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
}

TEST(OpenAiWriters, json_answers_an_error_as_the_error_reply) {
  auto w = make_openai_writer(ctx(Endpoint::Chat), false, false);
  w->start(1, {});
  w->text(0, "partial", nullptr);
  Finish f = finished(1, worker::FinishReason::Error);
  f.error = ApiError{ErrorKind::EngineRestarting, "worker died", {}};
  w->finish(f);
  auto reply = w->take_reply();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->status, http::status::service_unavailable);
  EXPECT_EQ(reply->retry_after_s, 1);
  EXPECT_EQ(json::parse(reply->body)["error"]["code"], "engine_restarting");
}

TEST(OpenAiWriters, legacy_functions_finish_with_function_call) {
  ResponseContext c = ctx(Endpoint::Chat);
  c.legacy_functions = true;
  EXPECT_EQ(openai_finish_reason(c, {worker::FinishReason::Stop, false, true}), "function_call");
  EXPECT_EQ(openai_finish_reason(c, {worker::FinishReason::Length, false, true}), "length");
  EXPECT_EQ(openai_finish_reason(c, {worker::FinishReason::Cancelled, true, true}), "stop");
}

}  // namespace
}  // namespace ember::server
