// POST /v1/chat/completions and /v1/completions: validate, template, tokenize, submit, then
// relay engine events as SSE chunks or one JSON body.
//
// Cancellation (DESIGN.md §3): the handler holds a CancelOnDrop on the request's token for as
// long as it serves the connection; only a completed answer disarms it, so a coroutine torn
// down early cancels. While the answer is produced, a read on the socket (the watcher) notices
// a client that leaves — streaming or not — and cancels at once; the engine sees it at its next
// poll site.
//
// Several choices (n > 1, or several /v1/completions prompts) are several engine streams read
// by this one handler; each choice has its own detokenizer, stop matcher and tool-call parser.
// They share one CancelToken (the client leaving stops them all); a stop string stops only its
// own choice (Engine cancel by id).
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

// Keeps the in-flight count and the request registry (for the drain cut-off) honest on every
// exit path.
struct InFlight {
  Server::Impl& s;
  std::vector<uint64_t> ids;
  explicit InFlight(Server::Impl& srv) : s(srv) { s.in_flight++; }
  void register_id(uint64_t rid) {
    ids.push_back(rid);
    std::lock_guard lock(s.reg_mu);
    s.requests.insert(rid);
  }
  ~InFlight() {
    {
      std::lock_guard lock(s.reg_mu);
      for (uint64_t id : ids) s.requests.erase(id);
    }
    s.in_flight--;
  }
};

TokenLogprob to_logprob(const TextCodec& text, const engine::TokenEvent& t) {
  TokenLogprob lp{text.token_text(t.id), t.logprob, {}};
  for (const auto& [id, p] : t.top) lp.top.emplace_back(text.token_text(id), p);
  return lp;
}

ApiError cancelled_error(engine::CancelCause cause) {
  if (cause == engine::CancelCause::Shutdown) {
    return {ErrorKind::Draining,
            "request cancelled: the server is shutting down and the drain deadline passed",
            {}};
  }
  return {ErrorKind::Internal,
          fmt::format("request cancelled ({})", engine::cancel_cause_name(cause)),
          {}};
}

std::string new_call_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

struct Prepared {
  std::shared_ptr<ServedModel> model;
  CompletionRequest r;
  std::vector<std::vector<int32_t>> prompts;  // one per prompt (chat: one)
  std::vector<std::string> echo;              // completions echo: each prompt's text
  std::shared_ptr<engine::TokenConstraint> constraint;
  bool parse_tools = false;
  int32_t n_ctx = 0;
  const char* prompt_param = "messages";
};

// Everything before the engine, as a plain function: state checks, parsing, the model name,
// the chat template, tokenization, the output constraint and the context check.
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
  const TextCodec& text = *p.model->text;
  if (endpoint == Endpoint::Chat) {
    const bool use_tools = !p.r.tools.is_null() && p.r.tool_choice != ToolChoice::None;
    auto enc = text.encode_chat(p.r.messages, use_tools ? p.r.tools : nlohmann::ordered_json());
    if (!enc) return ApiError{ErrorKind::InvalidRequest, enc.message(), "messages"};
    p.prompts.push_back(std::move(*enc));
    p.parse_tools = use_tools;
    auto c = make_constraint(p.r, text);
    if (auto* e = std::get_if<ApiError>(&c)) return *e;
    p.constraint = std::get<std::shared_ptr<engine::TokenConstraint>>(c);
  } else {
    p.prompt_param = "prompt";
    for (const Prompt& pr : p.r.prompts) {
      p.prompts.push_back(pr.is_tokens ? pr.tokens : text.encode_prompt(pr.text));
      if (p.r.echo) p.echo.push_back(pr.is_tokens ? text.decode(pr.tokens) : pr.text);
    }
  }
  p.n_ctx = p.model->engine->n_ctx();
  for (const auto& prompt : p.prompts) {
    const auto n_prompt = static_cast<int32_t>(prompt.size());
    if (n_prompt == 0) {
      return ApiError{ErrorKind::InvalidRequest, "the prompt is empty", p.prompt_param};
    }
    if (n_prompt >= p.n_ctx) {
      return ApiError{ErrorKind::ContextTooLong,
                      fmt::format("the prompt has {} tokens, but this model's context holds {} "
                                  "tokens (prompt and answer together)",
                                  n_prompt, p.n_ctx),
                      p.prompt_param};
    }
  }
  return p;
}

// One choice of the answer: its engine stream and its own text pipeline.
struct Choice {
  uint32_t index = 0;
  std::shared_ptr<engine::EventStream> stream;
  uint64_t rid = 0;
  std::unique_ptr<Detokenizer> detok;
  std::optional<StopMatcher> stop;
  std::optional<text::ToolCallParser> tools;
  std::string text;  // non-streaming: all content; streaming: unused
  std::vector<ToolCallOut> calls;
  std::vector<TokenLogprob> lps;  // streaming: since the last chunk; otherwise: all
  bool stopped_by_string = false;
  std::optional<engine::DoneEvent> done;
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
  std::string reason(engine::finish_reason_name(ch.done->reason));
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
  auto prepared = prepare(s, req, endpoint);
  if (auto* e = std::get_if<ApiError>(&prepared)) {
    Reply reply = error_reply(*e);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  Prepared& p = std::get<Prepared>(prepared);
  auto& model = p.model;
  CompletionRequest& r = p.r;
  const int32_t n_ctx = p.n_ctx;
  const char* prompt_param = p.prompt_param;
  int32_t n_prompt_total = 0;
  for (const auto& pr : p.prompts) n_prompt_total += static_cast<int32_t>(pr.size());

  InFlight in_flight(s);
  if (s.cut_off) {
    Reply reply = error_reply({ErrorKind::Draining, "the server is shutting down", {}});
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  engine::CancelToken token = engine::CancelToken::make();
  engine::CancelOnDrop guard = token.cancel_on_drop();
  auto wake = std::make_shared<Wake>(c->stream.get_executor());
  auto engine_client = model->engine;
  std::vector<Choice> choices;
  std::optional<ApiError> submit_error;
  for (size_t i = 0; i < p.prompts.size() && !submit_error; ++i) {
    engine::GenerateRequest g;
    const auto n_prompt = static_cast<int32_t>(p.prompts[i].size());
    g.prompt = std::move(p.prompts[i]);
    g.sampling = r.sampling;
    g.max_tokens = std::min(r.max_tokens.value_or(n_ctx - n_prompt), n_ctx - n_prompt);
    g.cancel = token;
    g.n = r.n;
    if (p.constraint) g.constraint = i == 0 ? p.constraint : p.constraint->clone();
    auto sub = engine_client->submit(std::move(g));
    if (!sub.ok()) {
      submit_error = sub.error ? from_submit_error(*sub.error)
                               : ApiError{ErrorKind::Internal, "engine refused the request", {}};
      if (submit_error->kind == ErrorKind::ContextTooLong) submit_error->param = prompt_param;
      break;
    }
    std::vector<std::shared_ptr<engine::EventStream>> streams = {sub.stream};
    streams.insert(streams.end(), sub.forks.begin(), sub.forks.end());
    for (auto& st : streams) {
      Choice ch;
      ch.index = static_cast<uint32_t>(choices.size());
      ch.stream = st;
      ch.rid = st->id();
      ch.detok = model->text->detokenizer();
      ch.stop.emplace(r.stop);
      if (p.parse_tools) ch.tools.emplace(model->text->tool_format());
      in_flight.register_id(ch.rid);
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
    for (auto& ch : choices) engine_client->cancel(ch.rid, engine::CancelCause::Client);
    Reply reply = error_reply(*submit_error);
    co_return co_await send_reply(s, *c, req, route, reply);
  }
  s.metrics.add_prompt_tokens(static_cast<uint64_t>(n_prompt_total));
  // The drain may have cut off before these ids were registered.
  if (s.cut_off) {
    for (auto& ch : choices) engine_client->cancel(ch.rid, engine::CancelCause::Shutdown);
  }

  auto watch = std::make_shared<Watch>();
  std::vector<uint64_t> rids;
  for (auto& ch : choices) rids.push_back(ch.rid);
  arm_watch(c, watch, wake, [token, engine_client, rids] {
    token.cancel();
    for (uint64_t rid : rids) engine_client->cancel(rid, engine::CancelCause::Client);
  });

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
    add_cors_headers(s, req, res.base());
    res.keep_alive(req.keep_alive());
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    auto [ec, n] =
        co_await http::async_write_header(c->stream, sr, asio::as_tuple(asio::use_awaitable));
    if (ec) write_failed = true;
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
        if (auto* d = std::get_if<engine::DoneEvent>(&*ev)) {
          ch.done = *d;
          break;
        }
        const auto& t = std::get<engine::TokenEvent>(*ev);
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
          engine_client->cancel(ch.rid, engine::CancelCause::Client);
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
  engine::Usage usage;
  usage.prompt_tokens = n_prompt_total;
  for (auto& ch : choices) {
    usage.completion_tokens += std::max(ch.done->usage.completion_tokens, ch.n_generated);
    if (ch.done->reason == engine::FinishReason::Cancelled && !ch.stopped_by_string) {
      if (!cancelled) cancelled = &ch;
    } else if (ch.done->reason == engine::FinishReason::Error && !failed) {
      failed = &ch;
    }
  }
  if (cancelled) {
    auto cause = watch->client_gone ? engine::CancelCause::Client : cancelled->done->cause;
    s.metrics.count_cancellation(engine::cancel_cause_name(cause));
  }

  bool keep = false;
  if (r.stream) {
    for (auto& ch : choices) events.push_back(chunk_final(ctx, ch.index, finish_reason(ctx, ch)));
    if (cancelled) {
      events.push_back(error_event(cancelled_error(cancelled->done->cause)));
    } else if (failed) {
      events.push_back(error_event({ErrorKind::Internal, failed->done->message, {}}));
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
      auto [ec, n] =
          co_await asio::async_write(c->stream, last, asio::as_tuple(asio::use_awaitable));
      if (ec) write_failed = true;
    }
    keep = req.keep_alive() && writable() && !s.is_draining;
  } else if (watch->client_gone) {
    keep = false;  // nobody to answer
  } else if (cancelled) {
    Reply reply = error_reply(cancelled_error(cancelled->done->cause));
    keep = co_await send_reply(s, *c, req, route, reply);
  } else if (failed) {
    Reply reply =
        error_reply({ErrorKind::Internal, "generation failed: " + failed->done->message, {}});
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
