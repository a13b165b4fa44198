#include "server/generation.h"

#include <algorithm>
#include <random>

#include "server/choice_pipeline.h"

namespace ember::server {
namespace {

using Clock = std::chrono::steady_clock;
using BuiltConstraint = std::variant<std::shared_ptr<worker::TokenConstraint>, ApiError>;

// A request without a seed gets a fresh one (OpenAI and llama.cpp do the same): the engine's
// default is a constant, which made every unseeded answer, retry and "regenerate" identical.
uint64_t fresh_seed() {
  thread_local std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

ApiError cancelled_error(worker::CancelCause cause) {
  if (cause == worker::CancelCause::Shutdown) {
    return {ErrorKind::Draining,
            "request cancelled: the server is shutting down and the drain deadline passed",
            {}};
  }
  return {ErrorKind::Internal,
          fmt::format("request cancelled ({})", worker::cancel_cause_name(cause)),
          {}};
}

// A request that ended in an engine error: lost with a dying worker (503, retry) or failed.
ApiError engine_error(const worker::DoneEvent& d) {
  if (d.retryable) return {ErrorKind::EngineRestarting, d.message, {}};
  return {ErrorKind::Internal, "generation failed: " + d.message, {}};
}

// One choice as the driver follows it.
struct ChoiceState {
  std::optional<worker::DoneEvent> done;
  Clock::time_point done_at;  // when the driver took the DoneEvent
  int32_t n_generated = 0;
};

void deliver(ResponseWriter& writer, uint32_t choice, const ChoicePipeline::Out& out) {
  writer.text(choice, out.content, out.logprob ? &*out.logprob : nullptr);
  for (const ToolCallOut& call : out.calls) writer.tool_call(choice, call);
}

// Usage, metrics and the error the answer ends with, once every choice is done.
Finish settle(Server::Impl& s, const Submission& sub, const std::vector<ChoiceState>& st,
              const std::vector<ChoicePipeline>& pipes, int32_t n_prompt) {
  Finish f;
  f.usage.prompt_tokens = n_prompt;
  const worker::DoneEvent* cancelled = nullptr;
  const worker::DoneEvent* failed = nullptr;
  for (size_t i = 0; i < st.size(); ++i) {
    const worker::DoneEvent& d = *st[i].done;
    f.usage.completion_tokens += std::max(d.usage.completion_tokens, st[i].n_generated);
    f.usage.cached_tokens += d.usage.cached_tokens;  // each prompt's first choice reports it
    if (d.reason == worker::FinishReason::Cancelled && !pipes[i].stopped_by_string()) {
      if (!cancelled) cancelled = &d;
    } else if (d.reason == worker::FinishReason::Error && !failed) {
      failed = &d;
    }
    if (d.timings.cancel_ms >= 0) {
      // From the front's evidence of the departure when it has any: that includes its
      // detection delay and the way to the engine, which the engine's figure cannot see.
      double seconds = d.timings.cancel_ms / 1000.0;
      auto gone = sub.gone_at();
      if (gone && st[i].done_at >= *gone) {
        seconds = std::max(seconds, std::chrono::duration<double>(st[i].done_at - *gone).count());
      }
      s.metrics.observe_cancel_latency(worker::cancel_phase_name(d.timings.cancel_phase), seconds);
    }
    f.choices.push_back({d.reason, pipes[i].stopped_by_string(), pipes[i].made_tool_calls(),
                         pipes[i].stop_string()});
  }
  // A client that left or stopped reading before its answer was written was cut off, even when
  // the engine had finished: counted with the server's cause.
  if (cancelled || sub.cause()) {
    auto cause = sub.cause() ? *sub.cause() : cancelled->cause;
    s.metrics.count_cancellation(worker::cancel_cause_name(cause));
  }
  if (cancelled) {
    f.error = cancelled_error(cancelled->cause);
  } else if (failed) {
    f.error = engine_error(*failed);
  }
  return f;
}

}  // namespace

// Note: no temporaries with destructors inside co_await expressions (GCC 12 may destroy them
// twice); answers are built into named values first.
asio::awaitable<bool> run_generation(Server::Impl& s, std::shared_ptr<Conn> c, const Request& req,
                                     std::string_view route, Clock::time_point t0,
                                     GenerationJob& job, ResponseWriter& writer) {
  SubmitSpec& spec = job.submit;
  if (!spec.constraint_spec.spec.empty() && !spec.constraint) {
    // The engine is in this process: compile here, once, on the compile thread (a grammar is
    // linear in its schema, but still no work for an I/O thread).
    std::shared_ptr<const text::TextCodec> codec = job.model->text;
    ConstraintSpec cs = spec.constraint_spec;
    auto compile = [codec, cs]() -> asio::awaitable<BuiltConstraint> {
      co_return build_constraint(cs, *codec);
    };
    auto on_pool = s.compile_pool.get_executor();
    BuiltConstraint built =
        co_await asio::co_spawn(on_pool, std::move(compile), asio::use_awaitable);
    if (auto* e = std::get_if<ApiError>(&built)) {
      Reply reply = writer.error_reply(*e);
      co_return co_await send_reply(s, *c, req, route, reply);
    }
    spec.constraint = std::get<std::shared_ptr<worker::TokenConstraint>>(built);
  }
  if (s.cut_off) {
    Reply reply = writer.error_reply({ErrorKind::Draining, "the server is shutting down", {}});
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  if (!job.seed_given) job.submit.sampling.seed = fresh_seed();
  int32_t n_prompt = 0;
  for (const auto& p : job.submit.prompts) n_prompt += static_cast<int32_t>(p.size());
  const auto n = static_cast<uint32_t>(job.submit.n);
  auto submitted = Submission::submit(s, c, job.model->engine, std::move(job.submit));
  if (auto* e = std::get_if<ApiError>(&submitted)) {
    Reply reply = writer.error_reply(*e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  Submission& sub = *std::get<std::unique_ptr<Submission>>(submitted);
  s.metrics.add_prompt_tokens(static_cast<uint64_t>(n_prompt));
  sub.watch(writer.streaming(), req.version() >= 11);

  std::vector<ChoicePipeline> pipes;
  std::vector<ChoiceState> st(sub.size());
  std::vector<std::string> echo;
  for (size_t i = 0; i < sub.size(); ++i) {
    pipes.emplace_back(*job.model->text, job.stop, job.parse_tools, job.logprobs);
    if (!job.echo.empty()) echo.push_back(job.echo[i / n]);
  }
  if (writer.streaming()) co_await sub.write_head(req, route, writer.content_type());
  writer.start(static_cast<uint32_t>(sub.size()), echo);

  std::optional<Clock::time_point> last_token;
  for (;;) {
    bool all_done = true;
    for (size_t i = 0; i < sub.size(); ++i) {
      while (!st[i].done) {
        auto ev = sub.next(i);
        if (!ev) break;
        if (auto* d = std::get_if<worker::DoneEvent>(&*ev)) {
          st[i].done = *d;
          st[i].done_at = Clock::now();
          break;
        }
        const auto& t = std::get<worker::TokenEvent>(*ev);
        auto now = Clock::now();
        if (!last_token) {
          s.metrics.observe_ttft(std::chrono::duration<double>(now - t0).count());
        } else {
          s.metrics.observe_inter_token(std::chrono::duration<double>(now - *last_token).count());
        }
        last_token = now;
        st[i].n_generated++;
        s.metrics.add_generated_tokens(1);
        auto out = pipes[i].push(t);
        if (out.stopped) sub.end_choice(i);
        deliver(writer, static_cast<uint32_t>(i), out);
      }
      all_done = all_done && st[i].done.has_value();
    }
    std::vector<std::string> pieces = writer.take_pieces();
    for (const std::string& piece : pieces) co_await sub.write_piece(piece);
    if (all_done) break;
    co_await sub.probe();
    co_await sub.wait();
  }

  // Text still held by the detokenizers, stop matchers and tool-call parsers.
  for (size_t i = 0; i < sub.size(); ++i) {
    auto out = pipes[i].finish();
    deliver(writer, static_cast<uint32_t>(i), out);
  }
  Finish finish = settle(s, sub, st, pipes, n_prompt);
  writer.finish(finish);

  bool keep = false;
  if (writer.streaming()) {
    std::vector<std::string> pieces = writer.take_pieces();
    for (const std::string& piece : pieces) co_await sub.write_piece(piece);
    co_await sub.write_end();
    keep = sub.writable() && s.keeps_connection(req);
  } else if (!sub.client_gone()) {  // else nobody to answer
    std::optional<Reply> reply = writer.take_reply();
    if (reply) keep = co_await sub.send(req, route, *reply);
  }
  s.metrics.observe_request_duration(std::chrono::duration<double>(Clock::now() - t0).count());
  co_return co_await sub.close(keep);
}

}  // namespace ember::server
