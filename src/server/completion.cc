// POST /v1/chat/completions and /v1/completions: validate, template, tokenize, submit, then
// relay engine events as SSE chunks or one JSON body.
//
// Cancellation: the handler owns the request's EventStream; a coroutine torn
// down early drops it, which cancels the request. While the answer is produced, a read on the
// socket (the watcher) notices a client that leaves — streaming or not — and cancels at once; the
// engine sees it at its next poll site.
// See docs/architecture.md, "Cancellation contract".
//
// Leak paths closed (issue 10):
// - The watcher never stops looking: bytes pipelined past kPipelineCap are discarded (and the
//   connection is closed after this answer) instead of ending the watch.
// - A half-close (EOF on read) is not a departure: HTTP lets a client shut its write side and
//   still want the answer. The watcher then probes: an HTTP/1.1 non-streaming request gets an
//   interim `100 Continue`, a stream an SSE comment (`: probe`, which SSE parsers skip), and a
//   peer that had closed for good answers it with a reset, which the watcher sees by peeking
//   the socket every kProbeInterval. A stream is probed at the EOF and then every
//   kProbeInterval in which nothing else was written, so a client that closes while nothing is
//   being written (queued, prefilling) is seen within about one interval, not when the first
//   token is written (issue 42: a streaming client that left during a 5,253-token prefill was
//   seen 5.8 s later, at its first token).
// - Cancel latency is timed here, from when the front had evidence that the client was gone
//   (the read that saw the reset, the probe write a reset answered, the start of the write
//   that failed) to the DoneEvent; the engine's own figure starts only when the cancel reached
//   it, and misses the front's detection delay and, with a worker process, the hop to it.
// - Every write has a deadline (write_timeout); a write that fails cancels the request at
//   once, as slow_consumer when the deadline passed, as client otherwise.
//
// Several choices (n > 1, or several /v1/completions prompts) are several engine streams read
// by this one handler; each choice has its own detokenizer, stop matcher and tool-call parser.
// They share one CancelToken (the client leaving stops them all); a stop string stops only its
// own choice (cancel by id).
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "server/constraint.h"
#include "server/responses.h"
#include "server/server_impl.h"
#include "server/sse.h"
#include "server/stop_matcher.h"

namespace ember::server {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using BuiltConstraint = std::variant<std::shared_ptr<worker::TokenConstraint>, ApiError>;

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
  bool stream = false;       // SSE: after EOF the handler writes the probes (`: probe`)
  bool probe_due = false;    // stream: a probe is due (the handler writes it; only it writes)
  std::optional<worker::CancelCause> cause;  // why the server cancelled (first reason wins)
  // When the front had evidence that the client was gone (see the header); cancel latency
  // is timed from here.
  std::optional<Clock::time_point> gone_at;
  std::optional<Clock::time_point> probe_at;  // the last probe written
  Clock::time_point last_write;               // the last write of the answer began
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

void client_left(Watch& w, const std::function<void()>& on_gone, std::string_view why,
                 Clock::time_point since) {
  log::debug("ember: client gone: {}", why);
  w.client_gone = true;
  if (!w.gone_at) w.gone_at = since;
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
          // The reset answered a probe (or a write of the answer): gone since that write.
          client_left(*w, on_gone, "reset after a half-close", w->probe_at.value_or(Clock::now()));
        } else if (w->stream && Clock::now() - w->last_write >= kProbeInterval) {
          w->probe_due = true;  // nothing written for an interval: the handler probes
          wake->notify();
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
        w->probe_at = Clock::now();
        w->may_probe = false;
      } else if (w->stream) {
        w->probe_due = true;  // the handler writes the first probe at once
        wake->notify();
      }
      arm_probe(std::move(c), std::move(w), std::move(wake), std::move(on_gone));
      return;
    }
    client_left(*w, on_gone, ec.message(), Clock::now());
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

// A request without a seed gets a fresh one, as OpenAI and llama.cpp do: the engine's default
// is a constant, which made every unseeded answer, retry and "regenerate" identical (issue 42).
uint64_t fresh_seed() {
  thread_local std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) | rd();
}

std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

struct Prepared {
  std::shared_ptr<ServedModel> model;
  CompletionRequest r;
  std::vector<std::vector<int32_t>> prompts;            // one per prompt (chat: one)
  std::vector<std::string> echo;                        // completions echo: each prompt's text
  ConstraintSpec constraint_spec;                       // checked against the limits
  std::shared_ptr<worker::TokenConstraint> constraint;  // built (or unbuilt) from it
  bool parse_tools = false;
  const char* prompt_param = "messages";
};

// Everything before the engine, as a plain function: state checks, parsing, the model name,
// the chat template, tokenization and the output constraint. The context check has one
// owner, the engine (its submit error names both numbers).
// The caller counts the request in flight BEFORE calling: a drain that begins while the
// request is being templated then waits for it rather than missing it.
std::variant<Prepared, ApiError> prepare(Server::Impl& s, const Request& req, Endpoint endpoint) {
  Prepared p;
  p.model = s.current_model();
  // With --reuse-port a request that reaches a draining server came over a connection the
  // kernel gave it before the handover: serving it (then closing) fails nothing; refusing it
  // would fail a request no client can know to retry. Past the drain deadline nothing new runs.
  if (s.is_draining && (!s.opts.reuse_port || s.cut_off)) {
    return ApiError{ErrorKind::Draining, "the server is shutting down", {}};
  }
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
  const text::TextCodec& text = *p.model->text;
  if (endpoint == Endpoint::Chat) {
    const bool use_tools = !p.r.tools.is_null() && p.r.tool_choice != ToolChoice::None;
    bool tool_history = false;
    for (const Message& m : p.r.messages) {
      tool_history = tool_history || !m.tool_calls.empty() || m.role == "tool";
    }
    Result<std::vector<int32_t>> enc = fail("not encoded");
    if (use_tools || tool_history) {
      enc = text.encode_chat_with_tools(template_messages(p.r.messages),
                                        use_tools ? p.r.tools : nlohmann::ordered_json());
    } else {
      std::vector<text::ChatMessage> conv;
      conv.reserve(p.r.messages.size());
      for (const Message& m : p.r.messages) conv.push_back({m.role, m.content});
      enc = text.encode_chat(conv);
    }
    if (!enc) return ApiError{ErrorKind::InvalidRequest, enc.message(), "messages"};
    p.prompts.push_back(std::move(*enc));
    p.parse_tools = use_tools;
    auto c = constraint_spec(p.r, text);
    if (auto* e = std::get_if<ApiError>(&c)) return *e;
    p.constraint_spec = std::move(std::get<ConstraintSpec>(c));
    if (!p.constraint_spec.spec.empty() && p.model->engine->builds_constraints()) {
      p.constraint = worker::unbuilt_constraint(p.constraint_spec.spec);
    }
  } else {
    p.prompt_param = "prompt";
    for (const Prompt& pr : p.r.prompts) {
      p.prompts.push_back(pr.is_tokens ? pr.tokens : text.encode_prompt(pr.text));
      if (p.r.echo) p.echo.push_back(pr.is_tokens ? text.decode(pr.tokens) : pr.text);
    }
  }
  for (const auto& prompt : p.prompts) {
    if (prompt.empty()) {
      return ApiError{ErrorKind::InvalidRequest, "the prompt is empty", p.prompt_param};
    }
  }
  return p;
}

// One choice of the answer: its engine stream and its own text pipeline.
struct Choice {
  uint32_t index = 0;
  std::shared_ptr<worker::EventStream> stream;
  uint64_t rid = 0;
  std::optional<text::IncrementalDetokenizer> detok;
  std::optional<StopMatcher> stop;
  std::optional<text::ToolCallParser> tools;
  std::string text;  // non-streaming: all content; streaming: unused
  std::vector<ToolCallOut> calls;
  std::vector<TokenLogprob> lps;  // streaming: since the last chunk; otherwise: all
  bool stopped_by_string = false;
  std::optional<worker::DoneEvent> done;
  Clock::time_point done_at;  // when the handler took the DoneEvent
  int32_t n_generated = 0;
};

// Text that passed the stop matcher: through the tool-call parser (when tools are on), then
// into the answer or into SSE events (`events`).
void emit(const ResponseContext& ctx, Choice& ch, std::string_view piece, bool at_end, bool stream,
          bool logprobs, std::vector<nlohmann::json>& events) {
  std::string content;
  std::vector<text::ToolCall> calls;
  if (ch.tools) {
    auto out = ch.tools->push(piece);
    if (at_end) {
      auto rest = ch.tools->finish();
      out.content += rest.content;
      for (auto& c : rest.calls) out.calls.push_back(std::move(c));
    }
    content = std::move(out.content);
    calls = std::move(out.calls);
  } else {
    content = std::string(piece);
  }
  if (!stream) {
    ch.text += content;
  } else if (!content.empty() || (logprobs && !ch.lps.empty() && !at_end)) {
    events.push_back(chunk_content(ctx, ch.index, content, logprobs ? &ch.lps : nullptr));
    ch.lps.clear();
  }
  for (auto& c : calls) {
    ToolCallOut out{new_call_id(), std::move(c.name), std::move(c.arguments)};
    if (stream) {
      const auto k = static_cast<uint32_t>(ch.calls.size());
      events.push_back(chunk_tool_call(ctx, ch.index, k, out, true, ""));
      events.push_back(chunk_tool_call(ctx, ch.index, k, out, false, out.arguments));
    }
    ch.calls.push_back(std::move(out));
  }
}

std::string finish_reason(const ResponseContext& ctx, const Choice& ch) {
  if (ch.stopped_by_string) return "stop";
  std::string reason(worker::finish_reason_name(ch.done->reason));
  if (!ch.calls.empty() && reason == "stop") {
    return ctx.legacy_functions ? "function_call" : "tool_calls";
  }
  return reason;
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
  if (!p.constraint_spec.spec.empty() && !p.constraint) {
    // The engine is in this process: compile here, once, on the compile thread (a grammar is
    // linear in its schema, but still no work for an I/O thread).
    std::shared_ptr<const text::TextCodec> codec = p.model->text;
    ConstraintSpec spec = p.constraint_spec;
    auto compile = [codec, spec]() -> asio::awaitable<BuiltConstraint> {
      co_return build_constraint(spec, *codec);
    };
    auto on_pool = s.compile_pool.get_executor();
    BuiltConstraint built =
        co_await asio::co_spawn(on_pool, std::move(compile), asio::use_awaitable);
    if (auto* e = std::get_if<ApiError>(&built)) {
      Reply reply = error_reply(*e);
      co_return co_await send_reply(s, *c, req, route, reply);
    }
    p.constraint = std::get<std::shared_ptr<worker::TokenConstraint>>(built);
  }
  auto& model = p.model;
  CompletionRequest& r = p.r;
  const char* prompt_param = p.prompt_param;
  int32_t n_prompt_total = 0;
  for (const auto& pr : p.prompts) n_prompt_total += static_cast<int32_t>(pr.size());

  if (s.cut_off) {
    Reply reply = error_reply({ErrorKind::Draining, "the server is shutting down", {}});
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  // No CancelOnDrop here: a handler torn down early (an exception, the io_context destroyed)
  // drops the choices' streams, and a dropped stream is a cancel the engine sees at its next
  // poll (engine test dropping_the_stream_cancels_the_request_and_frees_its_slot).
  if (!r.seed_given) r.sampling.seed = fresh_seed();  // choice i of a prompt: seed + i
  worker::CancelToken token = worker::CancelToken::make();
  auto wake = std::make_shared<Wake>(c->stream.get_executor());
  auto engine_client = model->engine;
  std::vector<Choice> choices;
  std::optional<ApiError> submit_error;
  for (size_t i = 0; i < p.prompts.size() && !submit_error; ++i) {
    worker::GenerateRequest g;
    g.prompt = std::move(p.prompts[i]);
    g.sampling = r.sampling;
    // No max_tokens: the server's cap (--max-tokens) bounds it; the engine clips either to the
    // context (one owner for that check).
    g.max_tokens = r.max_tokens.value_or(s.opts.default_max_tokens);
    g.cancel = token;
    g.n = r.n;
    if (p.constraint) g.constraint = i == 0 ? p.constraint : p.constraint->clone();
    auto sub = engine_client->submit(std::move(g));
    if (!sub.ok()) {
      submit_error = sub.error ? from_submit_error(*sub.error)
                               : ApiError{ErrorKind::Internal, "engine refused the request", {}};
      if (submit_error->kind == ErrorKind::ContextTooLong) submit_error->param = prompt_param;
      if (sub.error && sub.error->kind == worker::SubmitError::Kind::BadConstraint) {
        submit_error = constraint_error(p.constraint_spec, sub.error->message);
      }
      break;
    }
    std::vector<std::shared_ptr<worker::EventStream>> streams = {sub.stream};
    streams.insert(streams.end(), sub.forks.begin(), sub.forks.end());
    for (auto& st : streams) {
      Choice ch;
      ch.index = static_cast<uint32_t>(choices.size());
      ch.stream = st;
      ch.rid = st->id();
      ch.detok.emplace(model->text->detokenizer());
      ch.stop.emplace(r.stop);
      if (p.parse_tools) ch.tools.emplace(model->text->tool_format());
      std::weak_ptr<Wake> weak = wake;
      auto ex = c->stream.get_executor();
      st->set_waker([weak, ex] {
        if (auto w = weak.lock()) asio::post(ex, [w] { w->notify(); });
      });
      choices.push_back(std::move(ch));
    }
  }
  if (submit_error) {
    token.cancel();  // what was already submitted ends at its next poll
    for (auto& ch : choices) engine_client->cancel(ch.rid, worker::CancelCause::Client);
    Reply reply = error_reply(*submit_error);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  s.metrics.add_prompt_tokens(static_cast<uint64_t>(n_prompt_total));
  // The drain may have cut off before these ids were registered.
  if (s.cut_off) {
    for (auto& ch : choices) engine_client->cancel(ch.rid, worker::CancelCause::Shutdown);
  }

  auto watch = std::make_shared<Watch>(c->stream.get_executor());
  watch->may_probe = !r.stream && req.version() >= 11;
  watch->stream = r.stream;
  watch->last_write = Clock::now();
  std::vector<uint64_t> rids;
  for (auto& ch : choices) rids.push_back(ch.rid);
  auto cancel_for = [token, engine_client, rids](worker::CancelCause cause) {
    token.cancel();
    for (uint64_t rid : rids) engine_client->cancel(rid, cause);
  };
  arm_watch(c, watch, wake, [cancel_for] { cancel_for(worker::CancelCause::Client); });

  ResponseContext ctx{endpoint,
                      new_id(endpoint),
                      std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count(),
                      r.model,
                      r.include_usage,
                      r.legacy_functions};
  bool write_failed = false;
  std::optional<Clock::time_point> last_token;
  std::vector<nlohmann::json> events;  // SSE events produced, written in order

  auto writable = [&] { return !watch->client_gone && !write_failed; };
  // A failed write ends the request now: nobody will read the rest. A write past its deadline
  // is a client that stopped reading. Either way the client was gone when the write began.
  auto on_write = [&](const boost::system::error_code& ec) {
    c->stream.expires_never();
    if (!ec || write_failed) return;
    write_failed = true;
    auto cause = ec == beast::error::timeout ? worker::CancelCause::SlowConsumer
                                             : worker::CancelCause::Client;
    log::debug("ember: write failed ({}): cancelling", ec.message());
    if (!watch->cause) watch->cause = cause;
    if (!watch->gone_at) watch->gone_at = watch->last_write;
    cancel_for(cause);
  };
  std::string event;  // the SSE event being written
  auto write = [&]() -> asio::awaitable<void> {
    if (!writable()) co_return;
    auto chunk = http::make_chunk(asio::buffer(event));
    watch->last_write = Clock::now();
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
    add_cors_headers(s, req, res.base());
    res.keep_alive(req.keep_alive());
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    watch->last_write = Clock::now();
    c->stream.expires_after(s.opts.write_timeout);
    auto [ec, n] =
        co_await http::async_write_header(c->stream, sr, asio::as_tuple(asio::use_awaitable));
    on_write(ec);
    s.metrics.count_request(route, 200);
    for (auto& ch : choices) {
      if (endpoint == Endpoint::Chat) events.push_back(chunk_role(ctx, ch.index));
      if (!p.echo.empty()) {
        events.push_back(chunk_content(ctx, ch.index, p.echo[ch.index / uint32_t(r.n)], nullptr));
      }
    }
  } else if (!p.echo.empty()) {
    for (auto& ch : choices) ch.text = p.echo[ch.index / uint32_t(r.n)];
  }

  for (;;) {
    wake->notified = false;
    bool all_done = true;
    for (auto& ch : choices) {
      while (!ch.done) {
        auto ev = ch.stream->try_next();
        if (!ev) break;
        if (auto* d = std::get_if<worker::DoneEvent>(&*ev)) {
          ch.done = *d;
          ch.done_at = Clock::now();
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
        ch.n_generated++;
        s.metrics.add_generated_tokens(1);
        if (ch.stopped_by_string) continue;  // the engine is still finishing its current step
        if (r.logprobs) ch.lps.push_back(to_logprob(*model->text, t));
        auto step = ch.stop->push(ch.detok->push(t.id));
        if (step.stopped) {
          ch.stopped_by_string = true;
          engine_client->cancel(ch.rid, worker::CancelCause::Client);
        }
        emit(ctx, ch, step.emit, false, r.stream, r.logprobs, events);
      }
      all_done = all_done && ch.done.has_value();
    }
    for (auto& e : events) {
      event = sse_event(e);
      co_await write();
    }
    events.clear();
    if (all_done) break;
    if (watch->probe_due) {
      // A half-closed stream: a client that closed for good answers this with a reset.
      watch->probe_due = false;
      event = kSseProbe;
      watch->probe_at = Clock::now();
      co_await write();
      continue;  // events may have arrived meanwhile
    }
    co_await wait_for(*wake);
  }

  // Text still held by the detokenizers, stop matchers and tool-call parsers.
  for (auto& ch : choices) {
    std::string tail;
    if (!ch.stopped_by_string) {
      auto step = ch.stop->push(ch.detok->flush());
      tail = step.emit + (step.stopped ? "" : ch.stop->flush());
      ch.stopped_by_string = step.stopped;
    }
    emit(ctx, ch, tail, true, r.stream, false, events);
  }

  const Choice* cancelled = nullptr;
  const Choice* failed = nullptr;
  worker::Usage usage;
  usage.prompt_tokens = n_prompt_total;
  for (auto& ch : choices) {
    usage.completion_tokens += std::max(ch.done->usage.completion_tokens, ch.n_generated);
    usage.cached_tokens += ch.done->usage.cached_tokens;  // each prompt's first choice reports it
    if (ch.done->reason == worker::FinishReason::Cancelled && !ch.stopped_by_string) {
      if (!cancelled) cancelled = &ch;
    } else if (ch.done->reason == worker::FinishReason::Error && !failed) {
      failed = &ch;
    }
    if (ch.done->timings.cancel_ms >= 0) {
      // From the front's evidence of the departure when it has any: that includes its
      // detection delay and the way to the engine, which the engine's figure cannot see.
      double seconds = ch.done->timings.cancel_ms / 1000.0;
      if (watch->gone_at && ch.done_at >= *watch->gone_at) {
        seconds =
            std::max(seconds, std::chrono::duration<double>(ch.done_at - *watch->gone_at).count());
      }
      s.metrics.observe_cancel_latency(worker::cancel_phase_name(ch.done->timings.cancel_phase),
                                       seconds);
    }
  }
  // A client that left or stopped reading before its answer was written was cut off, even when
  // the engine had finished: counted with the server's cause.
  if (cancelled || watch->cause) {
    auto cause = watch->cause ? *watch->cause : cancelled->done->cause;
    s.metrics.count_cancellation(worker::cancel_cause_name(cause));
  }

  bool keep = false;
  watch->may_probe = false;  // the answer is written now: no probe may interleave it
  if (r.stream) {
    for (auto& ch : choices) events.push_back(chunk_final(ctx, ch.index, finish_reason(ctx, ch)));
    if (cancelled) {
      events.push_back(error_event(cancelled_error(cancelled->done->cause)));
    } else if (failed) {
      events.push_back(error_event(engine_error(*failed->done)));
    } else if (r.include_usage) {
      events.push_back(chunk_usage(ctx, usage));
    }
    for (auto& e : events) {
      event = sse_event(e);
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
    Reply reply = error_reply(cancelled_error(cancelled->done->cause));
    keep = co_await send_reply(s, *c, req, route, reply);
  } else if (failed) {
    Reply reply = error_reply(engine_error(*failed->done));
    keep = co_await send_reply(s, *c, req, route, reply);
  } else {
    std::vector<ChoiceOut> outs;
    for (auto& ch : choices) {
      std::string reason = finish_reason(ctx, ch);  // before the calls move out
      outs.push_back({ch.index, std::move(ch.text), std::move(ch.calls), std::move(reason),
                      r.logprobs ? &ch.lps : nullptr});
    }
    Reply reply{
        http::status::ok, "application/json", dump_json(full_response(ctx, outs, usage)), 0, {}};
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
