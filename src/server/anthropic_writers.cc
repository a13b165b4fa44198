#include "server/anthropic_writers.h"

#include <fmt/format.h>

#include "server/sse.h"
#include "text/json_limits.h"

namespace ember::server {
namespace {

using json = nlohmann::ordered_json;

// "call_<hex>" from the text pipeline becomes "toolu_<hex>".
std::string tool_use_id(const std::string& id) {
  return id.starts_with("call_") ? "toolu_" + id.substr(5) : "toolu_" + id;
}

// The arguments as an object (a parser that produced something else is answered as {}).
json tool_input(const std::string& arguments) {
  json input = text::parse_json_bounded(arguments);
  return input.is_object() ? input : json::object();
}

json usage_json(int32_t input, int32_t output) {
  return {{"input_tokens", input}, {"output_tokens", output}};
}

json stop_sequence_json(const ChoiceEnd& end) {
  return end.stop_string ? json(end.stop_sequence) : json(nullptr);
}

json error_json(const ApiError& e) {
  return {{"type", "error"},
          {"error", {{"type", anthropic_error_type(e)}, {"message", e.message}}}};
}

// dump() that never throws on invalid UTF-8 (key order kept, as Anthropic sends them).
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string event(const char* name, const json& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, dump(data));
}

class JsonWriter final : public ResponseWriter {
 public:
  explicit JsonWriter(MessagesContext ctx) : ctx_(std::move(ctx)) {}
  bool streaming() const override { return false; }
  const char* content_type() const override { return "application/json"; }
  Reply error_reply(const ApiError& e) const override { return anthropic_error_reply(e); }

  void start(uint32_t, const std::vector<std::string>&) override {}
  void text(uint32_t, const std::string& content, const TokenLogprob*) override {
    if (content.empty()) return;
    if (content_.empty() || content_.back()["type"] != "text") {
      content_.push_back({{"type", "text"}, {"text", ""}});
    }
    content_.back()["text"] = content_.back()["text"].get<std::string>() + content;
  }
  void tool_call(uint32_t, const ToolCallOut& call) override {
    content_.push_back({{"type", "tool_use"},
                        {"id", tool_use_id(call.id)},
                        {"name", call.name},
                        {"input", tool_input(call.arguments)}});
  }
  void finish(const Finish& f) override {
    if (f.error) {
      reply_ = error_reply(*f.error);
      return;
    }
    if (content_.empty()) content_.push_back({{"type", "text"}, {"text", ""}});
    const ChoiceEnd end = f.choices.empty() ? ChoiceEnd{} : f.choices[0];
    json body = {{"id", ctx_.id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", ctx_.model},
                 {"content", std::move(content_)},
                 {"stop_reason", anthropic_stop_reason(end)},
                 {"stop_sequence", stop_sequence_json(end)},
                 {"usage", usage_json(f.usage.prompt_tokens, f.usage.completion_tokens)}};
    reply_ = Reply{http::status::ok, content_type(), dump(body), 0, {}};
  }

 private:
  MessagesContext ctx_;
  json content_ = json::array();
};

class SseWriter final : public ResponseWriter {
 public:
  explicit SseWriter(MessagesContext ctx) : ctx_(std::move(ctx)) {}
  bool streaming() const override { return true; }
  Reply error_reply(const ApiError& e) const override { return anthropic_error_reply(e); }

  void start(uint32_t, const std::vector<std::string>&) override {
    json message = {{"id", ctx_.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", ctx_.model},
                    {"content", json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage", usage_json(ctx_.input_tokens, 0)}};
    put("message_start", {{"type", "message_start"}, {"message", std::move(message)}});
    put("ping", {{"type", "ping"}});
  }
  void text(uint32_t, const std::string& content, const TokenLogprob*) override {
    if (content.empty()) return;
    if (!in_text_) open({{"type", "text"}, {"text", ""}}, true);
    put("content_block_delta", {{"type", "content_block_delta"},
                                {"index", index_},
                                {"delta", {{"type", "text_delta"}, {"text", content}}}});
  }
  void tool_call(uint32_t, const ToolCallOut& call) override {
    open({{"type", "tool_use"},
          {"id", tool_use_id(call.id)},
          {"name", call.name},
          {"input", json::object()}},
         false);
    put("content_block_delta",
        {{"type", "content_block_delta"},
         {"index", index_},
         {"delta",
          {{"type", "input_json_delta"}, {"partial_json", tool_input(call.arguments).dump()}}}});
    close();
  }
  void finish(const Finish& f) override {
    if (f.error) {
      close();
      put("error", error_json(*f.error));
      return;
    }
    if (index_ < 0) open({{"type", "text"}, {"text", ""}}, true);
    close();
    const ChoiceEnd end = f.choices.empty() ? ChoiceEnd{} : f.choices[0];
    put("message_delta", {{"type", "message_delta"},
                          {"delta",
                           {{"stop_reason", anthropic_stop_reason(end)},
                            {"stop_sequence", stop_sequence_json(end)}}},
                          {"usage", {{"output_tokens", f.usage.completion_tokens}}}});
    put("message_stop", {{"type", "message_stop"}});
  }

 private:
  void put(const char* name, const json& data) { pieces_.push_back(event(name, data)); }
  void open(json block, bool text) {
    close();
    ++index_;
    put("content_block_start",
        {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
    open_ = true;
    in_text_ = text;
  }
  void close() {
    if (!open_) return;
    put("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_ = in_text_ = false;
  }

  MessagesContext ctx_;
  int index_ = -1;  // the current content block
  bool open_ = false;
  bool in_text_ = false;
};

}  // namespace

std::string anthropic_stop_reason(const ChoiceEnd& end) {
  if (end.stop_string) return "stop_sequence";
  if (end.tool_calls) return "tool_use";
  if (end.reason == worker::FinishReason::Length) return "max_tokens";
  return "end_turn";
}

std::string anthropic_error_type(const ApiError& e) {
  switch (error_info(e.kind).status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      break;
  }
  return error_info(e.kind).status >= 500 ? "api_error" : "invalid_request_error";
}

std::string anthropic_error_body(const ApiError& e) {
  return dump(error_json(e));
}

Reply anthropic_error_reply(const ApiError& e) {
  Reply r = server::error_reply(e);
  r.body = anthropic_error_body(e);
  return r;
}

std::unique_ptr<ResponseWriter> make_anthropic_writer(MessagesContext ctx, bool stream) {
  if (stream) return std::make_unique<SseWriter>(std::move(ctx));
  return std::make_unique<JsonWriter>(std::move(ctx));
}

}  // namespace ember::server
