// The Anthropic writers (server/anthropic_writers.h) without a socket: the message body, the
// typed event stream in order, and errors in Anthropic's shape.
#include "server/anthropic_writers.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ember::server {
namespace {

using json = nlohmann::json;

struct Event {
  std::string name;
  json data;
};

std::vector<Event> events(const std::vector<std::string>& pieces) {
  std::vector<Event> out;
  for (const std::string& p : pieces) {
    EXPECT_TRUE(p.starts_with("event: ") && p.ends_with("\n\n")) << p;
    size_t nl = p.find('\n');
    EXPECT_EQ(p.substr(nl + 1, 6), "data: ") << p;
    Event e{p.substr(7, nl - 7), json::parse(p.substr(nl + 7, p.size() - nl - 9))};
    EXPECT_EQ(e.data["type"], e.name);
    out.push_back(std::move(e));
  }
  return out;
}

Finish finished(ChoiceEnd end) {
  Finish f;
  f.choices = {end};
  f.usage = {11, 4, 0};
  return f;
}

TEST(AnthropicWriters, a_message_body_with_text_tool_use_stop_reason_and_usage) {
  auto w = make_anthropic_writer({"msg_1", "m", 11}, false);
  ASSERT_FALSE(w->streaming());
  w->start(1, {});
  w->text(0, "Hel", nullptr);
  w->text(0, "lo", nullptr);
  w->tool_call(0, {"call_ab", "get_weather", R"({"city":"Paris"})"});
  w->finish(finished({worker::FinishReason::Stop, false, true, ""}));
  auto reply = w->take_reply();
  ASSERT_TRUE(reply);
  json b = json::parse(reply->body);
  EXPECT_EQ(b["id"], "msg_1");
  EXPECT_EQ(b["type"], "message");
  EXPECT_EQ(b["role"], "assistant");
  EXPECT_EQ(b["model"], "m");
  ASSERT_EQ(b["content"].size(), 2u);
  EXPECT_EQ(b["content"][0], (json{{"type", "text"}, {"text", "Hello"}}));
  EXPECT_EQ(b["content"][1]["type"], "tool_use");
  EXPECT_EQ(b["content"][1]["id"], "toolu_ab");
  EXPECT_EQ(b["content"][1]["input"], (json{{"city", "Paris"}}));
  EXPECT_EQ(b["stop_reason"], "tool_use");
  EXPECT_TRUE(b["stop_sequence"].is_null());
  EXPECT_EQ(b["usage"], (json{{"input_tokens", 11}, {"output_tokens", 4}}));
}

TEST(AnthropicWriters, stop_reasons_name_the_stop_sequence_and_the_token_limit) {
  EXPECT_EQ(anthropic_stop_reason({worker::FinishReason::Length, false, false, ""}), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason({worker::FinishReason::Stop, false, false, ""}), "end_turn");
  auto w = make_anthropic_writer({"msg_1", "m", 1}, false);
  w->start(1, {});
  w->finish(finished({worker::FinishReason::Cancelled, true, false, "END"}));
  json b = json::parse(w->take_reply()->body);
  EXPECT_EQ(b["stop_reason"], "stop_sequence");
  EXPECT_EQ(b["stop_sequence"], "END");
  EXPECT_EQ(b["content"], json::parse(R"([{"type":"text","text":""}])"));
}

TEST(AnthropicWriters, the_stream_sends_typed_events_in_order) {
  auto w = make_anthropic_writer({"msg_1", "m", 11}, true);
  ASSERT_TRUE(w->streaming());
  w->start(1, {});
  w->text(0, "Hi", nullptr);
  w->text(0, "", nullptr);  // held back: nothing
  w->tool_call(0, {"call_x", "f", R"({"a":1})"});
  w->finish(finished({worker::FinishReason::Stop, false, true, ""}));
  auto e = events(w->take_pieces());
  std::vector<std::string> names;
  for (const Event& ev : e) names.push_back(ev.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "message_start", "ping", "content_block_start", "content_block_delta",
                       "content_block_stop", "content_block_start", "content_block_delta",
                       "content_block_stop", "message_delta", "message_stop"}));
  EXPECT_EQ(e[0].data["message"]["usage"]["input_tokens"], 11);
  EXPECT_EQ(e[2].data["content_block"]["type"], "text");
  EXPECT_EQ(e[3].data["delta"], (json{{"type", "text_delta"}, {"text", "Hi"}}));
  EXPECT_EQ(e[5].data["index"], 1);
  EXPECT_EQ(e[5].data["content_block"]["id"], "toolu_x");
  EXPECT_EQ(e[6].data["delta"]["type"], "input_json_delta");
  EXPECT_EQ(json::parse(e[6].data["delta"]["partial_json"].get<std::string>()), (json{{"a", 1}}));
  EXPECT_EQ(e[8].data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(e[8].data["usage"]["output_tokens"], 4);
}

TEST(AnthropicWriters, an_empty_stream_still_has_one_text_block_and_errors_end_it) {
  auto w = make_anthropic_writer({"msg_1", "m", 1}, true);
  w->start(1, {});
  w->finish(finished({worker::FinishReason::Length, false, false, ""}));
  auto e = events(w->take_pieces());
  ASSERT_EQ(e.size(), 6u);
  EXPECT_EQ(e[2].name, "content_block_start");
  EXPECT_EQ(e[3].name, "content_block_stop");
  EXPECT_EQ(e[4].data["delta"]["stop_reason"], "max_tokens");

  auto f = make_anthropic_writer({"msg_2", "m", 1}, true);
  f->start(1, {});
  f->text(0, "x", nullptr);
  Finish fin = finished({worker::FinishReason::Cancelled, false, false, ""});
  fin.error = ApiError{ErrorKind::Draining, "bye", {}};
  f->finish(fin);
  e = events(f->take_pieces());
  EXPECT_EQ(e.back().name, "error");
  EXPECT_EQ(e.back().data["error"]["type"], "overloaded_error");
  EXPECT_EQ(e[e.size() - 2].name, "content_block_stop");
}

TEST(AnthropicWriters, errors_keep_the_status_and_take_anthropics_shape) {
  Reply r =
      anthropic_error_reply({ErrorKind::InvalidRequest, "'max_tokens' is required", "max_tokens"});
  EXPECT_EQ(r.status, http::status::bad_request);
  EXPECT_EQ(json::parse(r.body),
            json::parse(R"({"type":"error","error":{"type":"invalid_request_error",
                "message":"'max_tokens' is required"}})"));
  EXPECT_EQ(anthropic_error_type({ErrorKind::Unauthorized, "", {}}), "authentication_error");
  EXPECT_EQ(anthropic_error_type({ErrorKind::ModelNotFound, "", {}}), "not_found_error");
  EXPECT_EQ(anthropic_error_type({ErrorKind::Internal, "", {}}), "api_error");
  auto w = make_anthropic_writer({"msg_1", "m", 1}, false);
  EXPECT_EQ(json::parse(w->error_reply({ErrorKind::ContextTooLong, "long", {}}).body)["type"],
            "error");
}

}  // namespace
}  // namespace ember::server
