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
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

json chunk_role(const ResponseContext& c) {
  return stream_chunk(c, {{"index", 0},
                          {"delta", {{"role", "assistant"}, {"content", ""}}},
                          {"logprobs", nullptr},
                          {"finish_reason", nullptr}});
}

json chunk_content(const ResponseContext& c, const std::string& text,
                   const std::vector<TokenLogprob>* logprobs) {
  if (c.endpoint == Endpoint::Chat) {
    return stream_chunk(c, {{"index", 0},
                            {"delta", {{"content", text}}},
                            {"logprobs", logprobs ? chat_logprobs(*logprobs) : json(nullptr)},
                            {"finish_reason", nullptr}});
  }
  return stream_chunk(c,
                      {{"index", 0},
                       {"text", text},
                       {"logprobs", logprobs ? completion_logprobs(*logprobs, 0) : json(nullptr)},
                       {"finish_reason", nullptr}});
}

json chunk_final(const ResponseContext& c, const std::string& finish_reason) {
  if (c.endpoint == Endpoint::Chat) {
    return stream_chunk(c, {{"index", 0},
                            {"delta", json::object()},
                            {"logprobs", nullptr},
                            {"finish_reason", finish_reason}});
  }
  return stream_chunk(
      c, {{"index", 0}, {"text", ""}, {"logprobs", nullptr}, {"finish_reason", finish_reason}});
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

json full_response(const ResponseContext& c, const std::string& text,
                   const std::string& finish_reason, const worker::Usage& u,
                   const std::vector<TokenLogprob>* logprobs) {
  json j = base(c, false);
  json choice;
  choice["index"] = 0;
  if (c.endpoint == Endpoint::Chat) {
    choice["message"] = {{"role", "assistant"}, {"content", text}};
    choice["logprobs"] = logprobs ? chat_logprobs(*logprobs) : json(nullptr);
  } else {
    choice["text"] = text;
    choice["logprobs"] = logprobs ? completion_logprobs(*logprobs, 0) : json(nullptr);
  }
  choice["finish_reason"] = finish_reason;
  j["choices"] = json::array({choice});
  j["usage"] = usage_json(u);
  return j;
}

}  // namespace ember::server
