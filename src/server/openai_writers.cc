#include "server/openai_writers.h"

#include "server/sse.h"

namespace ember::server {
namespace {

// SSE, both endpoints: [start chunks] -> content and tool-call chunks -> a final chunk per
// choice -> [an error event, or the usage chunk when include_usage] -> [DONE].
class SseWriter : public ResponseWriter {
 public:
  explicit SseWriter(ResponseContext ctx) : ctx_(std::move(ctx)) {}
  bool streaming() const override { return true; }

  void text(uint32_t choice, const std::string& content, const TokenLogprob* logprob) override {
    if (content.empty() && !logprob) return;
    std::vector<TokenLogprob> lps;
    if (logprob) lps.push_back(*logprob);
    put(chunk_content(ctx_, choice, content, logprob ? &lps : nullptr));
  }

  void tool_call(uint32_t choice, const ToolCallOut& call) override {
    if (calls_.size() <= choice) calls_.resize(choice + 1, 0);
    const uint32_t k = calls_[choice]++;
    put(chunk_tool_call(ctx_, choice, k, call, true, ""));
    put(chunk_tool_call(ctx_, choice, k, call, false, call.arguments));
  }

  void finish(const Finish& f) override {
    for (uint32_t i = 0; i < f.choices.size(); ++i) {
      put(chunk_final(ctx_, i, openai_finish_reason(ctx_, f.choices[i])));
    }
    if (f.error) {
      put(error_event(*f.error));
    } else if (ctx_.include_usage) {
      put(chunk_usage(ctx_, f.usage));
    }
    pieces_.push_back(kSseDone);
  }

 protected:
  void put(const nlohmann::json& j) { pieces_.push_back(sse_event(j)); }
  ResponseContext ctx_;

 private:
  std::vector<uint32_t> calls_;  // tool calls streamed so far, by choice
};

// Chat: each choice opens with a role chunk.
class ChatSseWriter final : public SseWriter {
 public:
  using SseWriter::SseWriter;
  void start(uint32_t n_choices, const std::vector<std::string>&) override {
    for (uint32_t i = 0; i < n_choices; ++i) put(chunk_role(ctx_, i));
  }
};

// Completions: with `echo`, each choice opens with its prompt's text.
class CompletionSseWriter final : public SseWriter {
 public:
  using SseWriter::SseWriter;
  void start(uint32_t, const std::vector<std::string>& echo) override {
    for (uint32_t i = 0; i < echo.size(); ++i) put(chunk_content(ctx_, i, echo[i], nullptr));
  }
};

// One JSON body, both endpoints: every choice's text, tool calls and log-probabilities
// gathered, then chat.completion / text_completion, or the error.
class JsonWriter : public ResponseWriter {
 public:
  JsonWriter(ResponseContext ctx, bool logprobs) : ctx_(std::move(ctx)), logprobs_(logprobs) {}
  bool streaming() const override { return false; }
  const char* content_type() const override { return "application/json"; }

  void start(uint32_t n_choices, const std::vector<std::string>& echo) override {
    choices_.resize(n_choices);
    for (uint32_t i = 0; i < echo.size() && i < n_choices; ++i) choices_[i].text = echo[i];
  }
  void text(uint32_t choice, const std::string& content, const TokenLogprob* logprob) override {
    choices_[choice].text += content;
    if (logprob) choices_[choice].lps.push_back(*logprob);
  }
  void tool_call(uint32_t choice, const ToolCallOut& call) override {
    choices_[choice].calls.push_back(call);
  }
  void finish(const Finish& f) override {
    if (f.error) {
      reply_ = error_reply(*f.error);
      return;
    }
    std::vector<ChoiceOut> outs;
    for (uint32_t i = 0; i < choices_.size(); ++i) {
      Gathered& g = choices_[i];
      outs.push_back({i, std::move(g.text), std::move(g.calls),
                      openai_finish_reason(ctx_, f.choices[i]), logprobs_ ? &g.lps : nullptr});
    }
    reply_ = Reply{
        http::status::ok, content_type(), dump_json(full_response(ctx_, outs, f.usage)), 0, {}};
  }

 private:
  struct Gathered {
    std::string text;
    std::vector<ToolCallOut> calls;
    std::vector<TokenLogprob> lps;
  };
  ResponseContext ctx_;
  bool logprobs_;
  std::vector<Gathered> choices_;
};

}  // namespace

std::string openai_finish_reason(const ResponseContext& ctx, const ChoiceEnd& end) {
  if (end.stop_string) return "stop";
  std::string reason(worker::finish_reason_name(end.reason));
  if (end.tool_calls && reason == "stop") {
    return ctx.legacy_functions ? "function_call" : "tool_calls";
  }
  return reason;
}

std::unique_ptr<ResponseWriter> make_openai_writer(ResponseContext ctx, bool stream,
                                                   bool logprobs) {
  if (!stream) return std::make_unique<JsonWriter>(std::move(ctx), logprobs);
  if (ctx.endpoint == Endpoint::Chat) return std::make_unique<ChatSseWriter>(std::move(ctx));
  return std::make_unique<CompletionSseWriter>(std::move(ctx));
}

}  // namespace ember::server
