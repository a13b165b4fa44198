#include "server/choice_pipeline.h"

#include <random>

#include <fmt/format.h>

namespace ember::server {
namespace {

std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

}  // namespace

ChoicePipeline::ChoicePipeline(const text::TextCodec& text, std::vector<std::string> stops,
                               bool parse_tools, bool logprobs)
    : text_(text), detok_(text.detokenizer()), stop_(std::move(stops)), logprobs_(logprobs) {
  if (parse_tools) tools_.emplace(text.tool_format());
}

ChoicePipeline::Out ChoicePipeline::push(const worker::TokenEvent& t) {
  if (stopped_) return {};
  std::optional<TokenLogprob> lp;
  if (logprobs_) {
    lp.emplace(TokenLogprob{text_.token_text(t.id), t.logprob, {}});
    for (const auto& [id, p] : t.top) lp->top.emplace_back(text_.token_text(id), p);
  }
  auto step = stop_.push(detok_.push(t.id));
  stopped_ = step.stopped;
  Out out = emit(step.emit, false);
  out.logprob = std::move(lp);
  out.stopped = step.stopped;
  return out;
}

ChoicePipeline::Out ChoicePipeline::finish() {
  std::string tail;
  if (!stopped_) {
    auto step = stop_.push(detok_.flush());
    tail = step.emit + (step.stopped ? "" : stop_.flush());
    stopped_ = step.stopped;
  }
  return emit(tail, true);
}

// Text that passed the stop matcher: through the tool-call parser when tools are on.
ChoicePipeline::Out ChoicePipeline::emit(std::string_view piece, bool at_end) {
  Out out;
  if (!tools_) {
    out.content = std::string(piece);
    return out;
  }
  auto parsed = tools_->push(piece);
  if (at_end) {
    auto rest = tools_->finish();
    parsed.content += rest.content;
    for (auto& c : rest.calls) parsed.calls.push_back(std::move(c));
  }
  out.content = std::move(parsed.content);
  for (auto& c : parsed.calls) {
    out.calls.push_back({new_call_id(), std::move(c.name), std::move(c.arguments)});
  }
  calls_ += out.calls.size();
  return out;
}

}  // namespace ember::server
