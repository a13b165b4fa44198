// Cancellation: the Submission owns the request's EventStreams; dropped early,
// they cancel the request. While the answer is produced, a read on the socket (the watcher)
// notices a client that leaves — streaming or not — and cancels at once; the engine sees it at
// its next poll site.
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
// - Every write has a deadline (write_timeout); a write that fails cancels the request at
//   once, as slow_consumer when the deadline passed, as client otherwise.
//
// gone_at(), the start of the cancel latency the driver reports, is when the front had
// evidence that the client was gone: the read that saw the reset, the probe write a reset
// answered, or the start of the write that failed. The engine's own figure starts only when
// the cancel reached it, and misses the front's detection delay and, with a worker process,
// the hop to it.
//
// The choices share one CancelToken (the client leaving stops them all); a stop string stops
// only its own choice (cancel by id).
#include "server/submission.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include "base/log.h"
#include "server/sse.h"

namespace ember::server {

using Clock = Submission::Clock;

// Wakes the handler coroutine from the engine thread (via a post to the connection's strand)
// and from the watcher. `notified` closes the race between draining the queue and waiting.
struct Submission::Wake {
  explicit Wake(asio::any_io_executor ex) : timer(ex) {}
  asio::steady_timer timer;
  bool notified = false;
  void notify() {
    notified = true;
    timer.cancel();
  }
};

namespace {

constexpr size_t kPipelineCap = 1 << 20;  // pipelined bytes kept for the next request
constexpr auto kProbeInterval = std::chrono::milliseconds(50);

}  // namespace

struct Submission::Watch {
  explicit Watch(asio::any_io_executor ex) : probe_timer(ex) {}
  bool done = false;         // no read or probe of the watcher is outstanding any more
  bool stopping = false;     // the handler asked it to stop
  bool client_gone = false;  // reset (or a close seen by the probe) while answering
  bool half_closed = false;  // EOF: the client sends no more; it may still want the answer
  bool discarded = false;    // pipelined bytes past the cap were dropped: close after answering
  bool may_probe = false;    // HTTP/1.1 and nothing written yet: an interim 100 is allowed
  bool stream = false;       // SSE: after EOF the handler writes the probes (`: probe`)
  bool probe_due = false;    // stream: a probe is due (the handler writes it; only it writes)
  std::optional<worker::CancelCause> cause;   // why the server cancelled (first reason wins)
  std::optional<Clock::time_point> gone_at;   // see the header
  std::optional<Clock::time_point> probe_at;  // the last probe written
  Clock::time_point last_write;               // the last write of the answer began
  std::function<void()> on_gone;              // cancels every choice
  asio::steady_timer probe_timer;
  std::array<char, 4096> sink;  // where pipelined bytes past the cap go
};

namespace {

using Watch = Submission::Watch;
using Wake = Submission::Wake;

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

void client_left(Watch& w, std::string_view why, Clock::time_point since) {
  log::debug("ember: client gone: {}", why);
  w.client_gone = true;
  if (!w.gone_at) w.gone_at = since;
  if (!w.cause) w.cause = worker::CancelCause::Client;
  w.on_gone();
}

// After EOF: look every kProbeInterval for the reset that tells a closed client from a
// half-closed one, until the handler stops the watch.
void arm_probe(std::shared_ptr<Conn> c, std::shared_ptr<Watch> w, std::shared_ptr<Wake> wake) {
  if (w->stopping || w->client_gone) {
    w->done = true;
    wake->notify();
    return;
  }
  w->probe_timer.expires_after(kProbeInterval);
  w->probe_timer.async_wait([c, w, wake](const boost::system::error_code&) mutable {
    if (!w->stopping && c->stream.socket().is_open() && socket_failed(c->stream.socket())) {
      // The reset answered a probe (or a write of the answer): gone since that write.
      client_left(*w, "reset after a half-close", w->probe_at.value_or(Clock::now()));
    } else if (w->stream && Clock::now() - w->last_write >= kProbeInterval) {
      w->probe_due = true;  // nothing written for an interval: the handler probes
      wake->notify();
    }
    arm_probe(std::move(c), std::move(w), std::move(wake));
  });
}

void arm_watch(std::shared_ptr<Conn> c, std::shared_ptr<Watch> w, std::shared_ptr<Wake> wake) {
  if (w->stopping) {
    w->done = true;
    wake->notify();
    return;
  }
  // Past the cap, bytes are read into a sink and dropped (the connection closes after this
  // answer), but the read goes on: a client that leaves is seen whatever it sent.
  const bool keep_bytes = c->buf.size() + w->sink.size() <= kPipelineCap;
  asio::mutable_buffer mb = keep_bytes ? c->buf.prepare(w->sink.size()) : asio::buffer(w->sink);
  c->stream.async_read_some(
      mb, [c, w, wake, keep_bytes](const boost::system::error_code& ec, size_t n) mutable {
        if (!ec) {
          if (keep_bytes) {
            c->buf.commit(n);  // pipelined bytes: kept for the next request
          } else {
            w->discarded = true;
          }
          arm_watch(std::move(c), std::move(w), std::move(wake));
          return;
        }
        if (w->stopping || ec == asio::error::operation_aborted) {
          // Stopped, or our own close (a write deadline passed: the writer cancels with its cause).
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
          arm_probe(std::move(c), std::move(w), std::move(wake));
          return;
        }
        client_left(*w, ec.message(), Clock::now());
        w->done = true;
        wake->notify();
      });
}

}  // namespace

Submission::Submission(Server::Impl& s, std::shared_ptr<Conn> c)
    : s_(s), c_(std::move(c)), token_(worker::CancelToken::make()) {
  wake_ = std::make_shared<Wake>(c_->stream.get_executor());
}

Submission::~Submission() = default;

std::variant<std::unique_ptr<Submission>, ApiError> Submission::submit(
    Server::Impl& s, std::shared_ptr<Conn> c, std::shared_ptr<worker::EngineClient> engine,
    SubmitSpec spec) {
  std::unique_ptr<Submission> sub(new Submission(s, std::move(c)));
  sub->engine_ = std::move(engine);
  std::optional<ApiError> error;
  for (size_t i = 0; i < spec.prompts.size() && !error; ++i) {
    worker::GenerateRequest g;
    g.prompt = std::move(spec.prompts[i]);
    g.sampling = spec.sampling;
    g.max_tokens = spec.max_tokens;
    g.cancel = sub->token_;
    g.n = spec.n;
    if (spec.constraint) g.constraint = i == 0 ? spec.constraint : spec.constraint->clone();
    auto r = sub->engine_->submit(std::move(g));
    if (!r.ok()) {
      error = r.error ? from_submit_error(*r.error)
                      : ApiError{ErrorKind::Internal, "engine refused the request", {}};
      if (error->kind == ErrorKind::ContextTooLong) error->param = spec.prompt_param;
      if (r.error && r.error->kind == worker::SubmitError::Kind::BadConstraint) {
        error = constraint_error(spec.constraint_spec, r.error->message);
      }
      break;
    }
    std::vector<std::shared_ptr<worker::EventStream>> streams = {r.stream};
    streams.insert(streams.end(), r.forks.begin(), r.forks.end());
    for (auto& st : streams) {
      std::weak_ptr<Wake> weak = sub->wake_;
      auto ex = sub->c_->stream.get_executor();
      st->set_waker([weak, ex] {
        if (auto w = weak.lock()) asio::post(ex, [w] { w->notify(); });
      });
      sub->rids_.push_back(st->id());
      sub->streams_.push_back(std::move(st));
    }
  }
  if (error) {
    sub->cancel_all(worker::CancelCause::Client);  // what was submitted ends at its next poll
    return *error;
  }
  // The drain may have cut off before these ids were registered.
  if (s.cut_off) {
    for (uint64_t rid : sub->rids_) sub->engine_->cancel(rid, worker::CancelCause::Shutdown);
  }
  return sub;
}

std::optional<worker::Event> Submission::next(size_t choice) {
  return streams_[choice]->try_next();
}

void Submission::end_choice(size_t choice) {
  engine_->cancel(rids_[choice], worker::CancelCause::Client);
}

void Submission::cancel_all(worker::CancelCause cause) {
  token_.cancel();
  for (uint64_t rid : rids_) engine_->cancel(rid, cause);
}

void Submission::watch(bool stream, bool interim_100) {
  watch_ = std::make_shared<Watch>(c_->stream.get_executor());
  watch_->stream = stream;
  watch_->may_probe = !stream && interim_100;
  watch_->last_write = Clock::now();
  // The watch outlives this object only until close() (or, torn down early, until its read
  // ends): it holds the token and the ids, not the Submission.
  watch_->on_gone = [token = token_, engine = engine_, rids = rids_] {
    token.cancel();
    for (uint64_t rid : rids) engine->cancel(rid, worker::CancelCause::Client);
  };
  arm_watch(c_, watch_, wake_);
}

asio::awaitable<void> Submission::wait() {
  if (!wake_->notified) {
    wake_->timer.expires_at(asio::steady_timer::time_point::max());
    co_await wake_->timer.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  wake_->notified = false;
}

bool Submission::writable() const {
  return !write_failed_ && !(watch_ && watch_->client_gone);
}
bool Submission::client_gone() const {
  return watch_ && watch_->client_gone;
}
std::optional<worker::CancelCause> Submission::cause() const {
  return watch_ ? watch_->cause : std::nullopt;
}
std::optional<Clock::time_point> Submission::gone_at() const {
  return watch_ ? watch_->gone_at : std::nullopt;
}

// A failed write ends the request now: nobody will read the rest. A write past its deadline
// is a client that stopped reading. Either way the client was gone when the write began.
void Submission::on_write(const boost::system::error_code& ec) {
  c_->stream.expires_never();
  if (!ec || write_failed_) return;
  write_failed_ = true;
  auto cause =
      ec == beast::error::timeout ? worker::CancelCause::SlowConsumer : worker::CancelCause::Client;
  log::debug("ember: write failed ({}): cancelling", ec.message());
  if (watch_) {
    if (!watch_->cause) watch_->cause = cause;
    if (!watch_->gone_at) watch_->gone_at = watch_->last_write;
  }
  cancel_all(cause);
}

asio::awaitable<void> Submission::write_head(const Request& req, std::string_view route,
                                             const char* content_type) {
  http::response<http::empty_body> res{http::status::ok, req.version()};
  res.set(http::field::server, "ember");
  res.set(http::field::content_type, content_type);
  res.set(http::field::cache_control, "no-cache");
  add_cors_headers(s_, req, res.base());
  res.keep_alive(req.keep_alive());
  res.chunked(true);
  http::response_serializer<http::empty_body> sr{res};
  if (watch_) watch_->last_write = Clock::now();
  c_->stream.expires_after(s_.opts.write_timeout);
  auto [ec, n] =
      co_await http::async_write_header(c_->stream, sr, asio::as_tuple(asio::use_awaitable));
  on_write(ec);
  s_.metrics.count_request(route, 200);
}

asio::awaitable<void> Submission::write_piece(const std::string& piece) {
  if (!writable()) co_return;
  auto chunk = http::make_chunk(asio::buffer(piece));
  if (watch_) watch_->last_write = Clock::now();
  c_->stream.expires_after(s_.opts.write_timeout);
  auto [ec, n] = co_await asio::async_write(c_->stream, chunk, asio::as_tuple(asio::use_awaitable));
  on_write(ec);
}

asio::awaitable<void> Submission::probe() {
  if (!watch_ || !watch_->probe_due) co_return;
  // A half-closed stream: a client that closed for good answers this with a reset.
  watch_->probe_due = false;
  static const std::string kProbe = kSseProbe;
  watch_->probe_at = Clock::now();
  co_await write_piece(kProbe);
}

asio::awaitable<void> Submission::write_end() {
  if (!writable()) co_return;
  auto last = http::make_chunk_last();
  c_->stream.expires_after(s_.opts.write_timeout);
  auto [ec, n] = co_await asio::async_write(c_->stream, last, asio::as_tuple(asio::use_awaitable));
  on_write(ec);
}

asio::awaitable<bool> Submission::send(const Request& req, std::string_view route,
                                       const Reply& reply) {
  if (watch_) watch_->may_probe = false;  // the answer is written now: no probe may interleave it
  co_return co_await send_reply(s_, *c_, req, route, reply);
}

asio::awaitable<bool> Submission::close(bool keep) {
  if (!watch_) co_return keep;
  watch_->stopping = true;
  watch_->may_probe = false;
  if (!watch_->done) {
    boost::system::error_code ignored;
    c_->stream.socket().cancel(ignored);
    watch_->probe_timer.cancel();
    while (!watch_->done) co_await wait();
  }
  co_return keep && !watch_->client_gone && !watch_->half_closed && !watch_->discarded;
}

}  // namespace ember::server
