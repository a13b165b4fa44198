// POST /v1/chat/completions and /v1/completions: validate, template, tokenize, submit, then
// relay engine events as SSE chunks or one JSON body.
//
// Cancellation (DESIGN.md §3): the handler owns the request's EventStream; a coroutine torn
// down early drops it, which cancels the request. While the answer is produced, a read on the
// socket (the watcher) notices a client that leaves — streaming or not — and cancels at once; the
// engine sees it at its next poll site.
//
// Leak paths closed (issue 10):
// - The watcher never stops looking: bytes pipelined past kPipelineCap are discarded (and the
//   connection is closed after this answer) instead of ending the watch.
// - A half-close (EOF on read) is not a departure: HTTP lets a client shut its write side and
//   still want the answer. The watcher then probes: an HTTP/1.1 non-streaming request gets an
//   interim `100 Continue` (streaming writes are probes already), and a peer that had closed
//   for good answers it with a reset, which the watcher sees by peeking the socket.
// - Every write has a deadline (write_timeout); a write that fails cancels the request at
//   once, as slow_consumer when the deadline passed, as client otherwise.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

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

constexpr size_t kPipelineCap = 1 << 20;  // pipelined bytes kept for the next request
constexpr auto kProbeInterval = std::chrono::milliseconds(50);

struct Watch {
  explicit Watch(asio::any_io_executor ex) : probe_timer(ex) {}
  bool done = false;         // no read or probe of the watcher is outstanding any more
  bool stopping = false;     // the handler asked it to stop
  bool client_gone = false;  // reset (or a close seen by the probe) while answering
  bool half_closed = false;  // EOF: the client sends no more; it may still want the answer
  bool discarded = false;    // pipelined bytes past the cap were dropped: close after answering
  bool may_probe = false;    // HTTP/1.1 and nothing written yet: an interim 100 is allowed
  std::optional<worker::CancelCause> cause;  // why the server cancelled (first reason wins)
  asio::steady_timer probe_timer;
  std::array<char, 4096> sink;  // where pipelined bytes past the cap go
};

// Whether the connection is dead: a peer that closed for good answers our next bytes with a
// reset, which moves the socket to CLOSE (or leaves an error); one that only shut its write
// side does not. (recv() cannot tell: after a FIN it reports end-of-stream forever.)
bool socket_failed(tcp::socket& s) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
    return true;
  }
  tcp_info info{};
  len = sizeof(info);
  return ::getsockopt(s.native_handle(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
         info.tcpi_state == TCP_CLOSE;
}

void client_left(Watch& w, const std::function<void()>& on_gone, std::string_view why) {
  log::debug("ember: client gone: {}", why);
  w.client_gone = true;
  if (!w.cause) w.cause = worker::CancelCause::Client;
  on_gone();
}

// After EOF: look every kProbeInterval for the reset that tells a closed client from a
// half-closed one, until the handler stops the watch.
void arm_probe(std::shared_ptr<Conn> c, std::shared_ptr<Watch> w, std::shared_ptr<Wake> wake,
               std::function<void()> on_gone) {
  if (w->stopping || w->client_gone) {
    w->done = true;
    wake->notify();
    return;
  }
  w->probe_timer.expires_after(kProbeInterval);
  w->probe_timer.async_wait(
      [c, w, wake, on_gone = std::move(on_gone)](const boost::system::error_code&) mutable {
        if (!w->stopping && c->stream.socket().is_open() && socket_failed(c->stream.socket())) {
          client_left(*w, on_gone, "reset after a half-close");
        }
        arm_probe(std::move(c), std::move(w), std::move(wake), std::move(on_gone));
      });
}

void arm_watch(std::shared_ptr<Conn> c, std::shared_ptr<Watch> w, std::shared_ptr<Wake> wake,
               std::function<void()> on_gone) {
  if (w->stopping) {
    w->done = true;
    wake->notify();
    return;
  }
  // Past the cap, bytes are read into a sink and dropped (the connection closes after this
  // answer), but the read goes on: a client that leaves is seen whatever it sent.
  const bool keep_bytes = c->buf.size() + w->sink.size() <= kPipelineCap;
  asio::mutable_buffer mb = keep_bytes ? c->buf.prepare(w->sink.size()) : asio::buffer(w->sink);
  c->stream.async_read_some(mb, [c, w, wake, keep_bytes, on_gone = std::move(on_gone)](
                                    const boost::system::error_code& ec, size_t n) mutable {
    if (!ec) {
      if (keep_bytes) {
        c->buf.commit(n);  // pipelined bytes: kept for the next request
      } else {
        w->discarded = true;
      }
      arm_watch(std::move(c), std::move(w), std::move(wake), std::move(on_gone));
      return;
    }
    if (w->stopping) {
      w->done = true;
      wake->notify();
      return;
    }
    if (ec == asio::error::operation_aborted) {
      // Our own close (a write deadline passed): the writer cancels with its cause.
      w->done = true;
      wake->notify();
      return;
    }
    if (ec == asio::error::eof) {
      w->half_closed = true;
      if (w->may_probe) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        // Nothing else is being written (may_probe), so the send buffer is empty and this
        // small write completes at once.
        (void)!::send(c->stream.socket().native_handle(), kContinue.data(), kContinue.size(),
                      MSG_NOSIGNAL | MSG_DONTWAIT);
        w->may_probe = false;
      }
      arm_probe(std::move(c), std::move(w), std::move(wake), std::move(on_gone));
      return;
    }
    client_left(*w, on_gone, ec.message());
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

TokenLogprob to_logprob(const text::TextCodec& text, const worker::TokenEvent& t) {
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
// The caller counts the request in flight BEFORE calling: a drain that begins while the
// request is being templated then waits for it rather than missing it.
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
    std::vector<text::ChatMessage> conv;
    conv.reserve(p.r.messages.size());
    for (const Message& m : p.r.messages) conv.push_back({m.role, m.content});
    auto enc = p.model->text->encode_chat(conv);
    if (!enc) return ApiError{ErrorKind::InvalidRequest, enc.message(), "messages"};
    p.prompt = std::move(*enc);
  } else {
    p.prompt = p.model->text->encode_prompt(p.r.prompt);
    p.prompt_param = "prompt";
  }
  // The context check has one owner, the engine (its submit error names both numbers).
  if (p.prompt.empty()) {
    return ApiError{ErrorKind::InvalidRequest, "the prompt is empty", p.prompt_param};
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
  InFlight in_flight(s);
  auto prepared = prepare(s, req, endpoint);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    Reply reply = error_reply(*e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  Prepared& p = std::get<Prepared>(prepared);
  auto& model = p.model;
  CompletionRequest& r = p.r;
  const auto n_prompt = static_cast<int32_t>(p.prompt.size());
  const char* prompt_param = p.prompt_param;

  if (s.cut_off) {
    Reply reply = error_reply({ErrorKind::Draining, "the server is shutting down", {}});
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  worker::GenerateRequest g;
  g.prompt = std::move(p.prompt);
  g.sampling = r.sampling;
  // No max_tokens: the server's cap (--max-tokens) bounds it; the engine clips either to the
  // context (one owner for that check).
  g.max_tokens = r.max_tokens.value_or(s.opts.default_max_tokens);
  g.cancel = worker::CancelToken::make();
  // No CancelOnDrop here: a handler torn down early (an exception, the io_context destroyed)
  // drops `sub.stream`, and a dropped stream is a cancel the engine sees at its next poll
  // (engine test dropping_the_stream_cancels_the_request_and_frees_its_slot). A guard on the
  // token was a second mechanism for the same promise that no test could tell apart.
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

  auto watch = std::make_shared<Watch>(c->stream.get_executor());
  watch->may_probe = !r.stream && req.version() >= 11;
  auto engine_client = model->engine;
  auto cancel_for = [token, engine_client, rid](worker::CancelCause cause) {
    token.cancel();
    engine_client->cancel(rid, cause);
  };
  arm_watch(c, watch, wake, [cancel_for] { cancel_for(worker::CancelCause::Client); });

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
  // A failed write ends the request now: nobody will read the rest. A write past its deadline
  // is a client that stopped reading.
  auto on_write = [&](const boost::system::error_code& ec) {
    c->stream.expires_never();
    if (!ec || write_failed) return;
    write_failed = true;
    auto cause = ec == beast::error::timeout ? worker::CancelCause::SlowConsumer
                                             : worker::CancelCause::Client;
    log::debug("ember: write failed ({}): cancelling", ec.message());
    if (!watch->cause) watch->cause = cause;
    cancel_for(cause);
  };
  std::string event;  // the SSE event being written
  auto write = [&]() -> asio::awaitable<void> {
    if (!writable()) co_return;
    auto chunk = http::make_chunk(asio::buffer(event));
    c->stream.expires_after(s.opts.write_timeout);
    auto [ec, n] =
        co_await asio::async_write(c->stream, chunk, asio::as_tuple(asio::use_awaitable));
    on_write(ec);
  };

  if (r.stream) {
    http::response<http::empty_body> res{http::status::ok, req.version()};
    res.set(http::field::server, "ember");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    res.keep_alive(req.keep_alive());
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    c->stream.expires_after(s.opts.write_timeout);
    auto [ec, n] =
        co_await http::async_write_header(c->stream, sr, asio::as_tuple(asio::use_awaitable));
    on_write(ec);
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
      auto step = stop.push(detok.push(t.id));
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
    auto step = stop.push(detok.flush());
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
    auto cause = watch->cause.value_or(done->cause);
    s.metrics.count_cancellation(worker::cancel_cause_name(cause));
  }
  if (done->timings.cancel_ms >= 0) {
    s.metrics.observe_cancel_latency(worker::cancel_phase_name(done->timings.cancel_phase),
                                     done->timings.cancel_ms / 1000.0);
  }
  std::string finish =
      stopped_by_string ? "stop" : std::string(worker::finish_reason_name(done->reason));
  worker::Usage usage = done->usage;
  if (usage.prompt_tokens == 0) usage.prompt_tokens = n_prompt;
  if (usage.completion_tokens == 0) usage.completion_tokens = static_cast<int32_t>(n_generated);

  bool keep = false;
  watch->may_probe = false;  // the answer is written now: no probe may interleave it
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
      c->stream.expires_after(s.opts.write_timeout);
      auto [ec, n] =
          co_await asio::async_write(c->stream, last, asio::as_tuple(asio::use_awaitable));
      on_write(ec);
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
    boost::system::error_code ignored;
    c->stream.socket().cancel(ignored);
    watch->probe_timer.cancel();
    while (!watch->done) {
      wake->notified = false;
      co_await wait_for(*wake);
    }
  }
  co_return keep && !watch->client_gone && !watch->half_closed && !watch->discarded;
}

}  // namespace ember::server
