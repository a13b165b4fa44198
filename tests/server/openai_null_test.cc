// `null` means "unset" for every optional field (clients serialise unset fields as null): a
// property test over every field ember reads, on both endpoints. Sending a field as null must
// give exactly what leaving it out gives — whatever the other fields say.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/openai_request.h"

namespace ember::server {
namespace {

using json = nlohmann::json;

// Everything a parse produced, as one comparable value (or the error it produced).
std::string outcome(const json& body, Endpoint e) {
  auto r = parse_completion_request(body.dump(), e);
  if (auto* err = std::get_if<ApiError>(&r)) {
    return "error " + err->message + " param " + err->param.value_or("-");
  }
  const CompletionRequest& c = std::get<CompletionRequest>(r);
  const auto& s = c.sampling;
  json msgs = json::array();
  for (const auto& m : c.messages) msgs.push_back(json::array({m.role, m.content}));
  json prompts = json::array();
  for (const auto& p : c.prompts) prompts.push_back(p.is_tokens ? json(p.tokens) : json(p.text));
  return json{{"model", c.model},
              {"messages", msgs},
              {"prompt", prompts},
              {"n", c.n},
              {"tools", c.tools.dump()},
              {"response_format", int(c.response_format)},
              {"logit_bias", c.sampling.logit_bias.size()},
              {"stream", c.stream},
              {"include_usage", c.include_usage},
              {"max_tokens", c.max_tokens ? json(*c.max_tokens) : json()},
              {"sampling",
               {s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.presence_penalty,
                s.frequency_penalty, s.seed, s.top_logprobs}},
              {"stop", c.stop},
              {"logprobs", c.logprobs},
              {"top_logprobs", c.top_logprobs},
              {"echo", c.echo},
              {"user", c.user}}
      .dump();
}

// Every optional field set to a value that differs from its default, so that a null which
// disturbed any other field would show.
json full_body(Endpoint e) {
  json b = {{"model", "m"},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"max_tokens", 3},
            {"max_completion_tokens", 5},
            {"temperature", 0.5},
            {"top_p", 0.5},
            {"min_p", 0.2},
            {"presence_penalty", 0.5},
            {"frequency_penalty", -0.5},
            {"repetition_penalty", 1.5},
            {"repeat_penalty", 1.25},
            {"top_k", 7},
            {"seed", 42},
            {"stop", {"END"}},
            {"user", "u"}};
  if (e == Endpoint::Chat) {
    b["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    b["logprobs"] = true;
    b["top_logprobs"] = 2;
  } else {
    b["prompt"] = "Once";
    b["logprobs"] = 2;
    b["echo"] = false;
  }
  return b;
}

// Optional fields ember reads but the full body leaves out (unsupported unless empty/default).
const char* kAbsentOptional[] = {
    "n",       "tools",  "functions",  "tool_choice", "function_call", "response_format",
    "best_of", "suffix", "logit_bias", "echo"};

TEST(OpenAiNull, every_optional_field_sent_as_null_means_unset) {
  for (Endpoint e : {Endpoint::Chat, Endpoint::Completion}) {
    const json full = full_body(e);
    std::vector<std::string> keys;
    for (const auto& [k, v] : full.items()) {
      if (k != "model" && k != "messages" && k != "prompt") keys.push_back(k);
    }
    for (const char* k : kAbsentOptional) keys.push_back(k);
    for (const std::string& key : keys) {
      SCOPED_TRACE((e == Endpoint::Chat ? "chat: " : "completion: ") + key);
      // Null next to every other field...
      json absent = full;
      absent.erase(key);
      json null = full;
      null[key] = nullptr;
      EXPECT_EQ(outcome(null, e), outcome(absent, e));
      // ...and next to each single other field alone (a null must not switch another off).
      for (const std::string& other : keys) {
        if (other == key || !full.contains(other)) continue;
        json base = {{"model", "m"}};
        if (e == Endpoint::Chat) base["messages"] = full["messages"];
        if (e == Endpoint::Completion) base["prompt"] = full["prompt"];
        base[other] = full[other];
        json with_null = base;
        with_null[key] = nullptr;
        EXPECT_EQ(outcome(with_null, e), outcome(base, e)) << "with " << other;
      }
    }
    json inner = full;
    inner["stream_options"]["include_usage"] = nullptr;
    json inner_absent = full;
    inner_absent["stream_options"].erase("include_usage");
    EXPECT_EQ(outcome(inner, e), outcome(inner_absent, e));
  }
}

// The case from the review: a null max_completion_tokens used to remove the max_tokens limit.
TEST(OpenAiNull, null_max_completion_tokens_keeps_max_tokens) {
  for (Endpoint e : {Endpoint::Chat, Endpoint::Completion}) {
    json b = {{"model", "m"}, {"max_tokens", 3}, {"max_completion_tokens", nullptr}};
    if (e == Endpoint::Chat) b["messages"] = {{{"role", "user"}, {"content", "hi"}}};
    if (e == Endpoint::Completion) b["prompt"] = "Once";
    auto r = parse_completion_request(b.dump(), e);
    ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
    EXPECT_EQ(std::get<CompletionRequest>(r).max_tokens, 3);
  }
}

TEST(OpenAiNull, max_completion_tokens_wins_over_max_tokens_when_both_are_set) {
  auto r = parse_completion_request(
      R"({"model":"m","prompt":"x","max_tokens":3,"max_completion_tokens":5})",
      Endpoint::Completion);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  EXPECT_EQ(std::get<CompletionRequest>(r).max_tokens, 5);
}

}  // namespace
}  // namespace ember::server
