#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace ember::server {
namespace {

ApiError error_of(std::string_view body, Endpoint e = Endpoint::Chat) {
  auto r = parse_completion_request(body, e);
  EXPECT_TRUE(std::holds_alternative<ApiError>(r)) << body;
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

CompletionRequest ok_of(std::string_view body, Endpoint e = Endpoint::Chat) {
  auto r = parse_completion_request(body, e);
  if (auto* err = std::get_if<ApiError>(&r)) ADD_FAILURE() << err->message;
  return std::holds_alternative<CompletionRequest>(r) ? std::get<CompletionRequest>(r)
                                                      : CompletionRequest{};
}

TEST(OpenAiRequest, parses_a_full_chat_request) {
  auto r = ok_of(R"({"model":"m","messages":[{"role":"system","content":"be brief"},
    {"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],
    "stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":7,
    "temperature":0,"top_p":0.5,"top_k":3,"min_p":0.1,"seed":42,"stop":["\n\n","END"],
    "presence_penalty":0.5,"frequency_penalty":-0.5,"logprobs":true,"top_logprobs":2,
    "user":"u1","some_future_field":{"x":1}})");
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.f);
  EXPECT_EQ(r.sampling.top_k, 3);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_EQ(r.user, "u1");
}

TEST(OpenAiRequest, completion_takes_prompt_and_integer_logprobs) {
  auto r = ok_of(R"({"model":"m","prompt":"Once","max_tokens":3,"logprobs":2,"stop":"."})",
                 Endpoint::Completion);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once");
  EXPECT_EQ(r.max_tokens, 3);
  EXPECT_TRUE(r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.stop, std::vector<std::string>{"."});
}

// A request without a seed (absent or null) is marked so: the handler draws a fresh one.
// A given seed, 0 and negative ones included, is kept as sent.
TEST(OpenAiRequest, a_seed_is_kept_and_its_absence_is_marked) {
  const std::string head = R"({"model":"m","messages":[{"role":"user","content":"x"}])";
  EXPECT_FALSE(ok_of(head + "}").seed_given);
  EXPECT_FALSE(ok_of(head + R"(,"seed":null})").seed_given);
  auto zero = ok_of(head + R"(,"seed":0})");
  EXPECT_TRUE(zero.seed_given);
  EXPECT_EQ(zero.sampling.seed, 0u);
  auto neg = ok_of(head + R"(,"seed":-1})");
  EXPECT_TRUE(neg.seed_given);
  EXPECT_EQ(neg.sampling.seed, ~uint64_t{0});
}

TEST(OpenAiRequest, malformed_json_is_invalid_json_400) {
  auto e = error_of(R"({"model": "m", "messages": [)");
  EXPECT_EQ(e.kind, ErrorKind::InvalidJson);
  EXPECT_EQ(error_info(e.kind).status, 400);
}

TEST(OpenAiRequest, a_body_nesting_past_the_limit_is_refused_before_parsing_naming_it) {
  auto body = [](int levels) {
    return R"({"model":"m","messages":[{"role":"user","content":"hi"}],"x":)" +
           std::string(size_t(levels), '[') + std::string(size_t(levels), ']') + "}";
  };
  ok_of(body(127));  // 127 arrays inside the body's object: 128 levels, the limit
  for (int levels : {128, 100'000}) {
    auto e = error_of(body(levels));
    EXPECT_EQ(e.kind, ErrorKind::InvalidRequest);
    EXPECT_EQ(error_info(e.kind).status, 400);
    EXPECT_EQ(e.message,
              "the request body nests arrays and objects deeper than 128 levels (limit 128)");
  }
  // Brackets inside strings are text, not nesting.
  ok_of(R"({"model":"m","messages":[{"role":"user","content":")" + std::string(1000, '[') +
        R"("}]})");
}

TEST(OpenAiRequest, wrong_types_name_the_parameter_with_code_invalid_type) {
  auto e =
      error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":"hot"})");
  EXPECT_EQ(e.kind, ErrorKind::InvalidType);
  EXPECT_EQ(e.param, "temperature");
  EXPECT_NE(e.message.find("number"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(error_body(e))["error"]["code"], "invalid_type");
  EXPECT_EQ(error_info(e.kind).status, 400);
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model":"m","messages":"hello"})", "messages"},
      {R"({"model":3,"messages":[{"role":"user","content":"x"}]})", "model"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1.5})",
       "max_tokens"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"})", "stream"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop":5})", "stop"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}})", "tools"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"user":1})", "user"},
  };
  for (const auto& [body, param] : cases) {
    e = error_of(body);
    EXPECT_EQ(e.param, param) << body;
    EXPECT_EQ(e.kind, ErrorKind::InvalidType) << body;
  }
  // A wrong value of the right type stays a plain invalid request (code null).
  e = error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":9})");
  EXPECT_EQ(e.kind, ErrorKind::InvalidRequest);
}

TEST(OpenAiRequest, empty_messages_is_rejected) {
  auto e = error_of(R"({"model":"m","messages":[]})");
  EXPECT_EQ(e.kind, ErrorKind::InvalidRequest);
  EXPECT_EQ(e.param, "messages");
  EXPECT_NE(e.message.find("empty"), std::string::npos);
}

TEST(OpenAiRequest, unknown_role_and_missing_content_are_rejected) {
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})").param,
            "messages[0].role");
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user"}]})").param, "messages[0].content");
}

TEST(OpenAiRequest, out_of_range_values_are_rejected) {
  EXPECT_EQ(
      error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":3})").param,
      "temperature");
  EXPECT_EQ(
      error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0})").param,
      "max_tokens");
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":3})")
                .param,
            "top_logprobs");
}

TEST(OpenAiRequest, unsupported_parameters_get_a_400_naming_them) {
  auto e = error_of(R"({"model":"m","prompt":"x","suffix":"y"})", Endpoint::Completion);
  EXPECT_EQ(e.kind, ErrorKind::Unsupported);
  EXPECT_EQ(e.param, "suffix");
  EXPECT_EQ(error_info(e.kind).status, 400);
  e = error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                  "tools":[{"type":"retrieval"}]})");
  EXPECT_EQ(e.kind, ErrorKind::Unsupported);
  EXPECT_EQ(e.param, "tools[0]");
  // n == 1 and an empty tools list are what the client sends by default: accepted.
  ok_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":1,"tools":[]})");
}

TEST(OpenAiRequest, n_logit_bias_and_completion_prompt_lists_are_read) {
  auto r = ok_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":3,
                     "logit_bias":{"15":-100,"7":2.5}})");
  EXPECT_EQ(r.n, 3);
  ASSERT_EQ(r.sampling.logit_bias.size(), 2u);
  EXPECT_EQ(r.sampling.logit_bias[0], (std::pair<int32_t, float>{15, -100.f}));
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":0})").param,
            "n");
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                         "logit_bias":{"a":1}})")
                .param,
            "logit_bias");
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                         "logit_bias":{"1":101}})")
                .param,
            "logit_bias");
  auto c = ok_of(R"({"model":"m","prompt":["a","b"],"echo":true})", Endpoint::Completion);
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[1].text, "b");
  EXPECT_TRUE(c.echo);
  auto t = ok_of(R"({"model":"m","prompt":[1,2,3]})", Endpoint::Completion);
  ASSERT_EQ(t.prompts.size(), 1u);
  EXPECT_TRUE(t.prompts[0].is_tokens);
  EXPECT_EQ(t.prompts[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  auto tt = ok_of(R"({"model":"m","prompt":[[1],[2,3]]})", Endpoint::Completion);
  EXPECT_EQ(tt.prompts.size(), 2u);
  EXPECT_EQ(error_of(R"({"model":"m","prompt":[-1]})", Endpoint::Completion).param, "prompt");
  EXPECT_EQ(error_of(R"({"model":"m","prompt":["a",[1]]})", Endpoint::Completion).param, "prompt");
}

TEST(OpenAiRequest, tools_tool_choice_and_replayed_tool_history_are_read) {
  auto r = ok_of(R"({"model":"m","messages":[
      {"role":"user","content":"weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"c1","content":"sunny"}],
    "tools":[{"type":"function","function":{"name":"get_weather",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
    "tool_choice":{"type":"function","function":{"name":"get_weather"}}})");
  ASSERT_EQ(r.messages.size(), 3u);
  ASSERT_EQ(r.messages[1].tool_calls.size(), 1u);
  EXPECT_EQ(r.messages[1].tool_calls[0].name, "get_weather");
  EXPECT_EQ(r.messages[1].tool_calls[0].arguments, R"({"city":"Oslo"})");
  EXPECT_EQ(r.messages[2].tool_call_id, "c1");
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                         "tools":[{"type":"function","function":{"name":"f"}}],
                         "tool_choice":{"type":"function","function":{"name":"g"}}})")
                .param,
            "tool_choice");
  EXPECT_EQ(
      error_of(
          R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"required"})")
          .param,
      "tool_choice");
}

TEST(OpenAiRequest, legacy_functions_map_onto_tools) {
  auto r = ok_of(R"({"model":"m","messages":[{"role":"user","content":"x"},
      {"role":"assistant","content":null,"function_call":{"name":"f","arguments":"{}"}},
      {"role":"function","name":"f","content":"42"}],
    "functions":[{"name":"f","parameters":{"type":"object"}}],"function_call":{"name":"f"}})");
  EXPECT_TRUE(r.legacy_functions);
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["type"], "function");
  EXPECT_EQ(r.tools[0]["function"]["name"], "f");
  EXPECT_EQ(r.tool_choice, ToolChoice::Named);
  EXPECT_EQ(r.messages[1].tool_calls.at(0).name, "f");
  EXPECT_EQ(r.messages[2].role, "tool");
}

TEST(OpenAiRequest, response_formats_are_read) {
  auto j = ok_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                     "response_format":{"type":"json_object"}})");
  EXPECT_EQ(j.response_format, ResponseFormat::JsonObject);
  auto s = ok_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                     "response_format":{"type":"json_schema","json_schema":{"name":"p",
                       "strict":true,"schema":{"type":"object"}}}})");
  EXPECT_EQ(s.response_format, ResponseFormat::JsonSchema);
  EXPECT_EQ(s.json_schema["type"], "object");
  EXPECT_EQ(error_of(R"({"model":"m","messages":[{"role":"user","content":"x"}],
                         "response_format":{"type":"yaml"}})")
                .param,
            "response_format");
}

TEST(OpenAiRequest, missing_model_or_prompt_is_rejected) {
  EXPECT_EQ(error_of(R"({"messages":[{"role":"user","content":"x"}]})").param, "model");
  EXPECT_EQ(error_of(R"({"model":"m"})", Endpoint::Completion).param, "prompt");
  EXPECT_EQ(error_of(R"([1,2])").kind, ErrorKind::InvalidType);
}

TEST(ApiError, body_is_openai_error_json_and_statuses_come_from_one_table) {
  auto body = nlohmann::json::parse(
      error_body({ErrorKind::ModelNotFound, "model 'x' does not exist", "model"}));
  EXPECT_EQ(body["error"]["message"], "model 'x' does not exist");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "model");
  EXPECT_EQ(body["error"]["code"], "model_not_found");
  EXPECT_EQ(error_info(ErrorKind::ModelNotFound).status, 404);
  EXPECT_EQ(error_info(ErrorKind::Unauthorized).status, 401);
  EXPECT_EQ(error_info(ErrorKind::BodyTooLarge).status, 413);
  EXPECT_EQ(error_info(ErrorKind::Overloaded).status, 429);
  EXPECT_GT(error_info(ErrorKind::Overloaded).retry_after_s, 0);
  EXPECT_EQ(error_info(ErrorKind::Draining).status, 503);
  EXPECT_GT(error_info(ErrorKind::Draining).retry_after_s, 0);
  auto nul = nlohmann::json::parse(error_body({ErrorKind::InvalidRequest, "x", {}}));
  EXPECT_TRUE(nul["error"]["param"].is_null());
  EXPECT_TRUE(nul["error"]["code"].is_null());
}

TEST(ApiError, engine_submit_errors_map_to_api_errors) {
  using K = worker::SubmitError::Kind;
  EXPECT_EQ(from_submit_error({K::Overloaded, "queue full"}).kind, ErrorKind::Overloaded);
  EXPECT_EQ(from_submit_error({K::PromptTooLong, "too long"}).kind, ErrorKind::ContextTooLong);
  EXPECT_EQ(from_submit_error({K::ShuttingDown, "bye"}).kind, ErrorKind::Draining);
  auto restarting = from_submit_error({K::EngineUnavailable, "worker restarting"});
  EXPECT_EQ(restarting.kind, ErrorKind::EngineRestarting);
  EXPECT_EQ(error_info(restarting.kind).status, 503);
  EXPECT_STREQ(error_info(restarting.kind).code, "engine_restarting");
  auto schema = from_submit_error({K::BadConstraint, "#: the schema feature 'pattern'"});
  EXPECT_EQ(schema.kind, ErrorKind::Unsupported);
  EXPECT_EQ(error_info(schema.kind).status, 400);
}

}  // namespace
}  // namespace ember::server
