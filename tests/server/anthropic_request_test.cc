// The Anthropic Messages parser (server/anthropic_request.h): what each body becomes, and the
// 400s naming what is wrong.
#include "server/anthropic_request.h"

#include <gtest/gtest.h>

namespace ember::server {
namespace {

CompletionRequest ok(const std::string& body, MessagesRoute route = MessagesRoute::Create) {
  auto r = parse_messages_request(body, route);
  if (auto* e = std::get_if<ApiError>(&r)) ADD_FAILURE() << e->message;
  return std::holds_alternative<CompletionRequest>(r) ? std::get<CompletionRequest>(r)
                                                      : CompletionRequest{};
}

ApiError err(const std::string& body, MessagesRoute route = MessagesRoute::Create) {
  auto r = parse_messages_request(body, route);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(AnthropicRequest, system_blocks_and_text_blocks_become_chat_messages) {
  auto r = ok(R"({"model":"m","max_tokens":5,"system":[{"type":"text","text":"Be "},
      {"type":"text","text":"brief."}],"messages":[{"role":"user","content":"hi"},
      {"role":"assistant","content":[{"type":"text","text":"yo"}]},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],
      "stop_sequences":["END"],"temperature":0.5,"top_p":0.9,"top_k":7,"stream":true})");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[2].content, "yo");
  EXPECT_EQ(r.messages[3].content, "ab");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 7);
  EXPECT_TRUE(r.stream);
  EXPECT_EQ(r.endpoint, Endpoint::Chat);
}

TEST(AnthropicRequest, max_tokens_is_required_to_create_but_not_to_count) {
  ApiError e = err(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("max_tokens"), std::string::npos);
  ok(R"({"model":"m","messages":[{"role":"user","content":"hi"}]})", MessagesRoute::CountTokens);
  EXPECT_EQ(err(R"({"model":"m","max_tokens":0,"messages":[{"role":"user","content":"x"}]})").param,
            "max_tokens");
}

TEST(AnthropicRequest, bad_inputs_name_the_field) {
  EXPECT_EQ(err(R"({"model":"m","max_tokens":1,"messages":[]})").param, "messages");
  EXPECT_EQ(
      err(R"({"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]})").param,
      "messages[0].role");
  ApiError image = err(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":
      [{"type":"image","source":{}}]}]})");
  EXPECT_EQ(image.kind, ErrorKind::Unsupported);
  EXPECT_EQ(image.param, "messages[0].content[0]");
  EXPECT_EQ(err(R"({"model":"m","max_tokens":1,"temperature":1.5,
      "messages":[{"role":"user","content":"x"}]})")
                .param,
            "temperature");
  std::string many = R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],
      "stop_sequences":[)";
  for (size_t i = 0; i <= kMaxStopSequences; ++i)
    many += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  EXPECT_EQ(err(many + "]}").param, "stop_sequences");
  EXPECT_EQ(err("[1,2").kind, ErrorKind::InvalidJson);
}

TEST(AnthropicRequest, tools_map_onto_the_openai_tools_and_tool_choice) {
  const std::string tools = R"("tools":[{"name":"get_weather","description":"d",
      "input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}])";
  auto r = ok(R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}],)" + tools +
              R"(,"tool_choice":{"type":"tool","name":"get_weather"}})");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools[0]["type"], "function");
  EXPECT_EQ(r.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.tools[0]["function"]["description"], "d");
  EXPECT_EQ(r.tools[0]["function"]["parameters"]["properties"]["city"]["type"], "string");
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.tool_choice_name, "get_weather");
  const std::string base =
      R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"x"}],)";
  EXPECT_EQ(ok(base + tools + R"(,"tool_choice":{"type":"any"}})").tool_choice,
            ToolChoice::Required);
  EXPECT_EQ(ok(base + tools + R"(,"tool_choice":{"type":"none"}})").tool_choice, ToolChoice::None);
  EXPECT_EQ(ok(base + tools + "}").tool_choice, ToolChoice::Auto);
  EXPECT_EQ(err(base + tools + R"(,"tool_choice":{"type":"tool","name":"nope"}})").param,
            "tool_choice.name");
  EXPECT_EQ(err(base + R"("tool_choice":{"type":"any"}})").param, "tool_choice");
  EXPECT_EQ(err(base + R"("tools":[{"name":"f"}]})").param, "tools[0].input_schema");
}

TEST(AnthropicRequest, tool_use_and_tool_result_blocks_replay_as_tool_calls_and_results) {
  auto r = ok(R"({"model":"m","max_tokens":9,"messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":[{"type":"text","text":"Let me look."},
        {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",
        "content":[{"type":"text","text":"18 C"}]}]}]})");
  ASSERT_EQ(r.messages.size(), 3u);
  EXPECT_EQ(r.messages[1].content, "Let me look.");
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].id, "toolu_1");
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(r.messages[2].role, "tool");
  EXPECT_EQ(r.messages[2].tool_call_id, "toolu_1");
  EXPECT_EQ(r.messages[2].name, "get_weather");
  EXPECT_EQ(r.messages[2].content, "18 C");
  // tool_use from a user, tool_result from the assistant: not Anthropic's shapes.
  EXPECT_EQ(err(R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":[
      {"type":"tool_use","id":"a","name":"f","input":{}}]}]})")
                .param,
            "messages[0].content[0]");
}

}  // namespace
}  // namespace ember::server
