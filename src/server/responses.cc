#include "server/responses.h"

namespace ember::server {
namespace {

using json = nlohmann::json;

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(static_cast<int>(ch));
  return b;
}

json chat_logprobs(const std::vector<TokenLogprob>& lps) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    json top = json::array();
    for (const auto& [tok, lp] : t.top) {
      top.push_back({{"token", tok}, {"logprob", lp}, {"bytes", bytes_of(tok)}});
    }
    content.push_back({{"token", t.token},
                       {"logprob", t.logprob},
                       {"bytes", bytes_of(t.token)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs(const std::vector<TokenLogprob>& lps, size_t offset0) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = offset0;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.token);
    token_lps.push_back(t.logprob);
    json top = json::object();
    for (const auto& [tok, lp] : t.top) top[tok] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.token.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json base(const ResponseContext& c, bool chunk) {
  json j;
  j["id"] = c.id;
  if (c.endpoint == Endpoint::Chat) {
    j["object"] = chunk ? "chat.completion.chunk" : "chat.completion";
  } else {
    j["object"] = "text_completion";
  }
  j["created"] = c.created;
  j["model"] = c.model;
  j["system_fingerprint"] = "ember";
  return j;
}

json stream_chunk(const ResponseContext& c, json choice) {
  json j = base(c, true);
  j["choices"] = json::array({std::move(choice)});
  if (c.include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace

json usage_json(const worker::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json chunk_role(const ResponseContext& c, uint32_t index) {
  return stream_chunk(c, {{"index", index},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"logprobs", nullptr},
                          {"finish_reason", nullptr}});
}

json chunk_content(const ResponseContext& c, uint32_t index, const std::string& text,
                   const std::vector<TokenLogprob>* logprobs) {
  if (c.endpoint == Endpoint::Chat) {
    return stream_chunk(c, {{"index", index},
                            {"delta", {{"content", text}}},
                            {"logprobs", logprobs ? chat_logprobs(*logprobs) : json(nullptr)},
                            {"finish_reason", nullptr}});
  }
  return stream_chunk(c,
                      {{"index", index},
                       {"text", text},
                       {"logprobs", logprobs ? completion_logprobs(*logprobs, 0) : json(nullptr)},
                       {"finish_reason", nullptr}});
}

json chunk_tool_call(const ResponseContext& c, uint32_t index, uint32_t call_index,
                     const ToolCallOut& call, bool header, const std::string& fragment) {
  json delta;
  if (c.legacy_functions) {
    delta["function_call"] =
        header ? json{{"name", call.name}, {"arguments", ""}} : json{{"arguments", fragment}};
  } else {
    json entry = {{"index", call_index}};
    if (header) {
      entry["id"] = call.id;
      entry["type"] = "function";
      entry["function"] = {{"name", call.name}, {"arguments", ""}};
    } else {
      entry["function"] = {{"arguments", fragment}};
    }
    delta["tool_calls"] = json::array({entry});
  }
  return stream_chunk(
      c, {{"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
}

json chunk_final(const ResponseContext& c, uint32_t index, const std::string& finish_reason) {
  if (c.endpoint == Endpoint::Chat) {
    return stream_chunk(c, {{"index", index},
                            {"delta", json::object()},
                            {"logprobs", nullptr},
                            {"finish_reason", finish_reason}});
  }
  return stream_chunk(
      c, {{"index", index}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason}});
}

json chunk_usage(const ResponseContext& c, const worker::Usage& u) {
  json j = base(c, true);
  j["choices"] = json::array();
  j["usage"] = usage_json(u);
  return j;
}

json error_event(const ApiError& e) {
  ErrorInfo info = error_info(e.kind);
  return {{"error",
           {{"message", e.message},
            {"type", info.type},
            {"param", e.param ? json(*e.param) : json(nullptr)},
            {"code", info.code ? json(info.code) : json(nullptr)}}}};
}

json full_response(const ResponseContext& c, const std::vector<ChoiceOut>& choices,
                   const worker::Usage& u) {
  json j = base(c, false);
  j["choices"] = json::array();
  for (const ChoiceOut& ch : choices) {
    json choice;
    choice["index"] = ch.index;
    if (c.endpoint == Endpoint::Chat) {
      json message = {{"role", "assistant"}};
      const bool calls = !ch.tool_calls.empty();
      message["content"] = calls && ch.text.empty() ? json(nullptr) : json(ch.text);
      if (calls && c.legacy_functions) {
        message["function_call"] = {{"name", ch.tool_calls[0].name},
                                    {"arguments", ch.tool_calls[0].arguments}};
      } else if (calls) {
        message["tool_calls"] = json::array();
        for (const ToolCallOut& t : ch.tool_calls) {
          message["tool_calls"].push_back(
              {{"id", t.id},
               {"type", "function"},
               {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
      }
      choice["message"] = std::move(message);
      choice["logprobs"] = ch.logprobs ? chat_logprobs(*ch.logprobs) : json(nullptr);
    } else {
      choice["text"] = ch.text;
      choice["logprobs"] = ch.logprobs ? completion_logprobs(*ch.logprobs, 0) : json(nullptr);
    }
    choice["finish_reason"] = ch.finish_reason;
    j["choices"].push_back(std::move(choice));
  }
  j["usage"] = usage_json(u);
  return j;
}

}  // namespace ember::server
