// POST /v1/chat/completions and /v1/completions: validate, template, tokenize, submit, then
// relay engine events as SSE chunks or one JSON body.
//
// Cancellation (DESIGN.md §3): the handler holds a CancelOnDrop on the request's token for as
// long as it serves the connection; only a completed answer disarms it, so a coroutine torn
// down early cancels. While the answer is produced, a read on the socket (the watcher) notices
// a client that leaves — streaming or not — and cancels at once; the engine sees it at its next
// poll site.
#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/responses.h"
#include "server/server_impl.h"
#include "server/sse.h"
#include "server/stop_matcher.h"

namespace ember::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Wakes the handler coroutine from the engine thread (via a post to the connection's strand)
// and from the watcher. `notified` closes the race between draining the queue and waiting.
struct Wake {
  explicit Wake(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  bool notified = false;
  void notify() {
    notified = true;
    timer.cancel();
  }
};

struct Watch {
  bool done = false;         // the watcher's read has completed for good
  bool stopping = false;     // the handler asked it to stop
  bool client_gone = false;  // EOF or reset while the answer was being produced
};

void arm_watch(std::shared_ptr<Conn> c, std::shared_ptr<Watch> w, std::shared_ptr<Wake> wake,
               std::function<void()> on_gone) {
  if (w->stopping || c->buf.size() > (1 << 20)) {  // a client pipelining megabytes: stop looking
    w->done = true;
    wake->notify();
    return;
  }
  auto mb = c->buf.prepare(4096);
  c->stream.async_read_some(mb, [c, w, wake, on_gone = std::move(on_gone)](
                                    const boost::system::error_code& ec, size_t n) mutable {
    if (!ec) {
      c->buf.commit(n);  // pipelined bytes: kept for the next request
      arm_watch(std::move(c), std::move(w), std::move(wake), std::move(on_gone));
      return;
    }
    if (!w->stopping) {
      log::debug("ember: client gone: {}", ec.message());
      w->client_gone = true;
      on_gone();
    }
    w->done = true;
    wake->notify();
  });
}

asio::awaitable<void> wait_for(Wake& wake) {
  if (wake.notified) co_return;
  wake.timer.expires_at(asio::steady_timer::time_point::max());
  co_await wake.timer.async_wait(asio::as_tuple(asio::use_awaitable));
}

std::string new_id(Endpoint e) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}", e == Endpoint::Chat ? "chatcmpl-" : "cmpl-", rng());
}

// Keeps the in-flight count honest on every exit path. Which requests the engine is running is
// the EngineClient's bookkeeping (the drain deadline asks it to cancel them all).
struct InFlight {
  Server::Impl& s;
  explicit InFlight(Server::Impl& srv) : s(srv) { s.in_flight++; }
  ~InFlight() { s.in_flight--; }
};

TokenLogprob to_logprob(const TextCodec& text, const worker::TokenEvent& t) {
  TokenLogprob lp{text.token_text(t.id), t.logprob, {}};
  for (const auto& [id, p] : t.top) lp.top.emplace_back(text.token_text(id), p);
  return lp;
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

struct Prepared {
  std::shared_ptr<ServedModel> model;
  CompletionRequest r;
  std::vector<int32_t> prompt;
  int32_t n_ctx = 0;
  const char* prompt_param = "messages";
};

// Everything before the engine, as a plain function: state checks, parsing, the model name,
// the chat template, tokenization and the context check.
std::variant<Prepared, ApiError> prepare(Server::Impl& s, const Request& req, Endpoint endpoint) {
  Prepared p;
  p.model = s.current_model();
  if (s.is_draining) return ApiError{ErrorKind::Draining, "the server is shutting down", {}};
  if (!p.model) return ApiError{ErrorKind::NotReady, "the model is still loading", {}};
  auto parsed = parse_completion_request(req.body(), endpoint);
  if (auto* e = std::get_if<ApiError>(&parsed)) return *e;
  p.r = std::move(std::get<CompletionRequest>(parsed));
  const auto& names = p.model->names;
  if (std::find(names.begin(), names.end(), p.r.model) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
    return ApiError{
        ErrorKind::ModelNotFound,
        fmt::format("model '{}' does not exist; this server serves {}", p.r.model, list), "model"};
  }
  if (endpoint == Endpoint::Chat) {
    auto enc = p.model->text->encode_chat(p.r.messages);
    if (!enc) return ApiError{ErrorKind::InvalidRequest, enc.message(), "messages"};
    p.prompt = std::move(*enc);
  } else {
    p.prompt = p.model->text->encode_prompt(p.r.prompt);
    p.prompt_param = "prompt";
  }
  p.n_ctx = p.model->engine->n_ctx();
  const auto n_prompt = static_cast<int32_t>(p.prompt.size());
  if (n_prompt == 0)
    return ApiError{ErrorKind::InvalidRequest, "the prompt is empty", p.prompt_param};
  if (n_prompt >= p.n_ctx) {
    return ApiError{ErrorKind::ContextTooLong,
                    fmt::format("the prompt has {} tokens, but this model's context holds {} "
                                "tokens (prompt and answer together)",
                                n_prompt, p.n_ctx),
                    p.prompt_param};
  }
  return p;
}

}  // namespace

// Note: no temporaries with destructors inside co_await expressions (GCC 12 may destroy them
// twice); answers are built into named values first.
asio::awaitable<bool> handle_completion(Server::Impl& s, std::shared_ptr<Conn> c,
                                        const Request& req, Endpoint endpoint,
                                        std::string_view route) {
  const auto t0 = Clock::now();
  auto prepared = prepare(s, req, endpoint);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    Reply reply = error_reply(*e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  Prepared& p = std::get<Prepared>(prepared);
  auto& model = p.model;
  CompletionRequest& r = p.r;
  const int32_t n_ctx = p.n_ctx;
  const auto n_prompt = static_cast<int32_t>(p.prompt.size());
  const char* prompt_param = p.prompt_param;

  InFlight in_flight(s);
  if (s.cut_off) {
    Reply reply = error_reply({ErrorKind::Draining, "the server is shutting down", {}});
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  worker::GenerateRequest g;
  g.prompt = std::move(p.prompt);
  g.sampling = r.sampling;
  g.max_tokens = std::min(r.max_tokens.value_or(n_ctx - n_prompt), n_ctx - n_prompt);
  g.cancel = worker::CancelToken::make();
  worker::CancelOnDrop guard = g.cancel.cancel_on_drop();
  worker::CancelToken token = g.cancel;

  auto wake = std::make_shared<Wake>(c->stream.get_executor());
  auto sub = model->engine->submit(std::move(g));
  if (!sub.ok()) {
    ApiError e = sub.error ? from_submit_error(*sub.error)
                           : ApiError{ErrorKind::Internal, "engine refused the request", {}};
    if (e.kind == ErrorKind::ContextTooLong) e.param = prompt_param;
    Reply reply = error_reply(e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  const uint64_t rid = sub.stream->id();
  s.metrics.add_prompt_tokens(static_cast<uint64_t>(n_prompt));
  {
    std::weak_ptr<Wake> weak = wake;
    auto ex = c->stream.get_executor();
    sub.stream->set_waker([weak, ex] {
      if (auto w = weak.lock()) asio::post(ex, [w] { w->notify(); });
    });
  }
  // The drain may have cut off before this request reached the engine.
  if (s.cut_off) model->engine->cancel(rid, worker::CancelCause::Shutdown);

  auto watch = std::make_shared<Watch>();
  auto engine_client = model->engine;
  arm_watch(c, watch, wake, [token, engine_client, rid] {
    token.cancel();
    engine_client->cancel(rid, worker::CancelCause::Client);
  });

  ResponseContext ctx{endpoint, new_id(endpoint),
                      std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count(),
                      r.model, r.include_usage};
  auto detok = model->text->detokenizer();
  StopMatcher stop(r.stop);
  std::string text;
  std::vector<TokenLogprob> lps;  // streaming: since the last chunk; otherwise: all
  bool stopped_by_string = false;
  bool write_failed = false;
  std::optional<worker::DoneEvent> done;
  std::optional<Clock::time_point> last_token;
  uint64_t n_generated = 0;

  auto writable = [&] { return !watch->client_gone && !write_failed; };
  std::string event;  // the SSE event being written
  auto write = [&]() -> asio::awaitable<void> {
    if (!writable()) co_return;
    auto chunk = http::make_chunk(asio::buffer(event));
    auto [ec, n] =
        co_await asio::async_write(c->stream, chunk, asio::as_tuple(asio::use_awaitable));
    if (ec) write_failed = true;
  };

  if (r.stream) {
    http::response<http::empty_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "ember");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(req.keep_alive());
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    auto [ec, n] =
        co_await http::async_write_header(c->stream, sr, asio::as_tuple(asio::use_awaitable));
    if (ec) write_failed = true;
    s.metrics.count_request(route, 200);
    if (endpoint == Endpoint::Chat) {
      event = sse_event(chunk_role(ctx));
      co_await write();
    }
  }

  for (;;) {
    wake->notified = false;
    while (!done) {
      auto ev = sub.stream->try_next();
      if (!ev) break;
      if (auto* d = std::get_if<worker::DoneEvent>(&*ev)) {
        done = *d;
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
      n_generated++;
      s.metrics.add_generated_tokens(1);
      if (stopped_by_string) continue;  // the engine is still finishing its current step
      if (r.logprobs) lps.push_back(to_logprob(*model->text, t));
      auto step = stop.push(detok->push(t.id));
      if (step.stopped) {
        stopped_by_string = true;
        token.cancel();
        model->engine->cancel(rid, worker::CancelCause::Client);  // the token stays in-process
      }
      if (r.stream) {
        if (!step.emit.empty() || (r.logprobs && !lps.empty() && !step.stopped)) {
          event = sse_event(chunk_content(ctx, step.emit, r.logprobs ? &lps : nullptr));
          co_await write();
          lps.clear();
        }
      } else {
        text += step.emit;
      }
    }
    if (done) break;
    co_await wait_for(*wake);
  }

  // Text still held by the detokenizer or the stop matcher.
  if (!stopped_by_string) {
    auto step = stop.push(detok->flush());
    std::string tail = step.emit + (step.stopped ? "" : stop.flush());
    stopped_by_string = step.stopped;
    if (r.stream && !tail.empty()) {
      event = sse_event(chunk_content(ctx, tail, nullptr));
      co_await write();
    } else {
      text += tail;
    }
  }

  const bool cancelled = done->reason == worker::FinishReason::Cancelled && !stopped_by_string;
  if (cancelled) {
    auto cause = watch->client_gone ? worker::CancelCause::Client : done->cause;
    s.metrics.count_cancellation(worker::cancel_cause_name(cause));
  }
  std::string finish =
      stopped_by_string ? "stop" : std::string(worker::finish_reason_name(done->reason));
  worker::Usage usage = done->usage;
  if (usage.prompt_tokens == 0) usage.prompt_tokens = n_prompt;
  if (usage.completion_tokens == 0) usage.completion_tokens = static_cast<int32_t>(n_generated);

  bool keep = false;
  if (r.stream) {
    event = sse_event(chunk_final(ctx, finish));
    co_await write();
    if (cancelled) {
      event = sse_event(error_event(cancelled_error(done->cause)));
      co_await write();
    } else if (done->reason == worker::FinishReason::Error) {
      event = sse_event(error_event(engine_error(*done)));
      co_await write();
    } else if (r.include_usage) {
      event = sse_event(chunk_usage(ctx, usage));
      co_await write();
    }
    event = kSseDone;
    co_await write();
    if (writable()) {
      auto last = http::make_chunk_last();
      auto [ec, n] =
          co_await asio::async_write(c->stream, last, asio::as_tuple(asio::use_awaitable));
      if (ec) write_failed = true;
    }
    keep = req.keep_alive() && writable() && !s.is_draining;
  } else if (watch->client_gone) {
    keep = false;  // nobody to answer
  } else if (cancelled) {
    Reply reply = error_reply(cancelled_error(done->cause));
    keep = co_await send_reply(s, *c, req, route, reply);
  } else if (done->reason == worker::FinishReason::Error) {
    Reply reply = error_reply(engine_error(*done));
    keep = co_await send_reply(s, *c, req, route, reply);
  } else {
    Reply reply{http::status::ok, "application/json",
                dump_json(full_response(ctx, text, finish, usage, r.logprobs ? &lps : nullptr)), 0};
    keep = co_await send_reply(s, *c, req, route, reply);
  }
  s.metrics.observe_request_duration(std::chrono::duration<double>(Clock::now() - t0).count());

  // Stop the watcher and wait until its read has completed: the next request reads the socket.
  watch->stopping = true;
  if (!watch->done) {
    c->stream.socket().cancel();
    while (!watch->done) {
      wake->notified = false;
      co_await wait_for(*wake);
    }
  }
  guard.disarm();  // the answer is complete (or its client gone and cancelled already)
  co_return keep && !watch->client_gone;
}

}  // namespace ember::server
