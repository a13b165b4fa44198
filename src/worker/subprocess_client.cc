#include "worker/subprocess_client.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/event_stream.h"
#include "worker/engine_settings.h"

namespace ember::worker {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

// What the server holds: events from the channel; letting go early cancels in the worker.
class SubprocessStream final : public EventStream {
 public:
  SubprocessStream(std::shared_ptr<engine::EventChannel> ch,
                   std::weak_ptr<SubprocessEngineClient> client)
      : ch_(std::move(ch)), client_(std::move(client)) {}
  ~SubprocessStream() override {
    ch_->mark_consumer_gone();
    if (auto c = client_.lock()) c->stream_dropped(ch_->id());
  }
  uint64_t id() const override { return ch_->id(); }
  std::optional<Event> next() override { return ch_->next(); }
  std::optional<Event> try_next() override { return ch_->try_next(); }
  void set_waker(std::function<void()> w) override { ch_->set_waker(std::move(w)); }

 private:
  std::shared_ptr<engine::EventChannel> ch_;
  std::weak_ptr<SubprocessEngineClient> client_;
};

DoneEvent ended(FinishReason reason, CancelCause cause, std::string message, bool retryable) {
  DoneEvent d;
  d.reason = reason;
  d.cause = cause;
  d.message = std::move(message);
  d.retryable = retryable;
  return d;
}

int32_t event_queue_capacity_of(const std::vector<std::pair<std::string, std::string>>& kv) {
  EngineSettings s;
  // Settings the table refuses are the worker's to report (it refuses to configure).
  if (auto st = engine_settings_table().apply(s, kv); !st)
    return EngineSettings{}.event_queue_capacity;
  return s.event_queue_capacity;
}

}  // namespace

SubprocessEngineClient::SubprocessEngineClient(SubprocessOptions opts)
    : opts_(std::move(opts)), event_queue_capacity_(event_queue_capacity_of(opts_.settings)) {}

std::shared_ptr<SubprocessEngineClient> SubprocessEngineClient::start(SubprocessOptions opts) {
  std::shared_ptr<SubprocessEngineClient> c(new SubprocessEngineClient(std::move(opts)));
  c->supervisor_ = std::thread([raw = c.get()] { raw->supervise(); });
  return c;
}

SubprocessEngineClient::~SubprocessEngineClient() {
  shutdown();
}

Result<ModelInfo> SubprocessEngineClient::wait_first_load(Ms timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return ever_loaded_ || first_error_ || stopping_; })) {
    return fail("the engine worker did not load the model within {} s", timeout.count() / 1000);
  }
  if (first_error_) return Error{*first_error_};
  if (!ever_loaded_) return fail("the engine worker was stopped before it loaded the model");
  return info_;
}

bool SubprocessEngineClient::send(const std::vector<uint8_t>& frame) {
  std::shared_ptr<process::Child> child;
  {
    std::lock_guard lock(mu_);
    child = child_;
  }
  return child && child->write_stdin(frame).ok();
}

void SubprocessEngineClient::supervise() {
  int failures = 0;
  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      state_ = State::Starting;
    }
    auto spawned = process::Child::spawn({opts_.argv});
    if (!spawned) {
      log::error("engine worker: {}", spawned.message());
      std::lock_guard lock(mu_);
      first_error_ = spawned.message();
      state_ = State::Down;
      cv_.notify_all();
      break;
    }
    std::shared_ptr<process::Child> child = std::move(*spawned);
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;  // shutdown() came meanwhile: ~Child kills the new one
      child_ = child;
    }
    log::info("engine worker: started pid {}", child->pid());
    const auto t_start = Clock::now();
    send(proto::encode(proto::Configure{opts_.settings, opts_.eog_tokens}));
    read_events(*child);  // until the worker's stdout closes

    std::unique_lock lock(mu_);
    if (stopping_) break;  // shutdown()'s stop ladder reaps it
    lock.unlock();
    auto st = child->wait_for(Ms(2000));
    if (!st) {  // stdout closed but still running: not a worker we can talk to
      child->signal_group(SIGKILL);
      st = child->wait_for(Ms(5000));
    }
    std::string how = st ? st->describe() : "not reaped";
    lock.lock();
    child_.reset();
    state_ = State::Down;
    const bool loaded_before = ever_loaded_;
    std::string why =
        fmt::format("the engine worker (pid {}) exited unexpectedly ({})", child->pid(), how);
    lose_all(why);
    if (!loaded_before) {
      if (!first_error_) first_error_ = why;
      log::error("engine worker: {}; not restarting: the model never loaded", why);
      cv_.notify_all();
      break;
    }
    failures = (Clock::now() - t_start >= opts_.stable_after) ? 1 : failures + 1;
    Ms delay = std::min<Ms>(opts_.backoff_max,
                            opts_.backoff_initial * (int64_t{1} << std::min(failures - 1, 20)));
    restarts_++;
    log::error("engine worker: {}; restart #{} in {} ms ({} failure(s) in a row)", why, restarts_,
               delay.count(), failures);
    cv_.wait_for(lock, delay, [&] { return stopping_; });
  }
  std::lock_guard lock(mu_);
  cv_.notify_all();
}

void SubprocessEngineClient::read_events(process::Child& child) {
  proto::FrameDecoder dec;
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    ssize_t n = ::read(child.stdout_fd(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    dec.feed({buf.data(), static_cast<size_t>(n)});
    for (;;) {
      auto f = dec.next();
      if (!f) {
        log::error("engine worker: protocol error from the worker: {}", f.message());
        if (dec.fatal()) {
          child.signal_group(SIGKILL);  // cannot follow it any more: restart it
          return;
        }
        continue;
      }
      if (!*f) break;
      dispatch(**f, child);
    }
  }
}

void SubprocessEngineClient::dispatch(const proto::Frame& f, process::Child& child) {
  auto bad = [&](const std::string& m) { log::error("engine worker: {}", m); };
  switch (f.type) {
    case proto::Type::Token: {
      auto m = proto::decode<proto::Token>(f.payload);
      if (!m) return bad(m.message());
      std::shared_ptr<engine::EventChannel> ch;
      {
        std::lock_guard lock(mu_);
        auto it = live_.find(m->id);
        if (it != live_.end()) ch = it->second.ch;
      }
      if (ch && !ch->push_token(std::move(m->token))) {
        send(proto::encode(proto::Cancel{m->id, CancelCause::SlowConsumer}));
      }
      return;
    }
    case proto::Type::Done: {
      auto m = proto::decode<proto::Done>(f.payload);
      if (!m) return bad(m.message());
      std::shared_ptr<engine::EventChannel> ch;
      {
        std::lock_guard lock(mu_);
        auto it = live_.find(m->id);
        if (it == live_.end() || it->second.ended) return;
        ch = it->second.ch;
        it->second.ended = true;
        if (it->second.claimed) live_.erase(it);  // else submit() erases it once claimed
      }
      ch->push_done(std::move(m->done));
      return;
    }
    case proto::Type::Accepted:
    case proto::Type::Rejected: {
      uint64_t id;
      std::optional<SubmitError> err;
      if (f.type == proto::Type::Accepted) {
        auto m = proto::decode<proto::Accepted>(f.payload);
        if (!m) return bad(m.message());
        id = m->id;
      } else {
        auto m = proto::decode<proto::Rejected>(f.payload);
        if (!m) return bad(m.message());
        id = m->id;
        err = m->error;
      }
      std::lock_guard lock(mu_);
      // Every choice of the request (consecutive ids from `id`) shares its admission.
      for (auto it = live_.find(id); it != live_.end() && it->second.base == id; ++it) {
        if (it->second.admission != Admission::Pending) continue;
        it->second.admission = err ? Admission::Rejected : Admission::Accepted;
        if (err) it->second.rejection = *err;
      }
      cv_.notify_all();
      return;
    }
    case proto::Type::WarmSaved: {
      auto m = proto::decode<proto::WarmSaved>(f.payload);
      if (!m) return bad(m.message());
      std::lock_guard lock(mu_);
      last_warm_ = std::move(m->report);
      ++warm_answered_;
      cv_.notify_all();
      return;
    }
    case proto::Type::Stats: {
      auto m = proto::decode<proto::Stats>(f.payload);
      if (!m) return bad(m.message());
      std::lock_guard lock(mu_);
      last_stats_ = m->stats;
      return;
    }
    case proto::Type::Hello: {
      auto m = proto::decode<proto::Hello>(f.payload);
      if (!m) return bad(m.message());
      std::lock_guard lock(mu_);
      if (!ever_loaded_) info_ = m->model;
      ever_loaded_ = true;
      last_stats_ = m->stats;
      warm_answered_ = warm_asked_;  // a fresh worker owes nothing a dead one was asked
      if (state_ == State::Starting) state_ = State::Up;
      log::info("engine worker: pid {} ready", child.pid());
      cv_.notify_all();
      return;
    }
    case proto::Type::LoadFailed: {
      auto m = proto::decode<proto::LoadFailed>(f.payload);
      if (!m) return bad(m.message());
      log::error("engine worker: the model did not load: {}", m->message);
      std::lock_guard lock(mu_);
      if (!ever_loaded_) first_error_ = m->message;
      cv_.notify_all();
      return;
    }
    case proto::Type::ProtocolError: {
      auto m = proto::decode<proto::ProtocolError>(f.payload);
      if (!m) return bad(m.message());
      return bad("the worker reports a protocol error: " + m->message);
    }
    default:
      return bad(fmt::format("unexpected {} frame from the worker", proto::type_name(f.type)));
  }
}

void SubprocessEngineClient::end_all(const DoneEvent& done) {
  for (auto& [id, l] : live_) {
    if (l.admission == Admission::Accepted && !l.ended) {
      l.ch->push_done(done);
      l.ended = true;
    } else if (l.admission == Admission::Pending) {
      l.admission = Admission::Lost;  // submit() is waiting: it answers unavailable
    }
  }
  std::erase_if(live_, [](const auto& kv) { return kv.second.claimed; });
  cv_.notify_all();
}

void SubprocessEngineClient::lose_all(const std::string& why) {
  // Called with mu_ held.
  end_all(ended(FinishReason::Error, CancelCause::None,
                why + "; the request was lost and the worker is restarting", true));
  last_stats_ = EngineStats{};
}

SubmitResult SubprocessEngineClient::submit(GenerateRequest req) {
  SubmitResult r;
  const int32_t n = std::max<int32_t>(1, req.n);
  proto::Submit m;
  if (req.constraint) {
    m.constraint = req.constraint->spec();
    if (m.constraint.empty()) {
      r.error = SubmitError{SubmitError::Kind::InvalidRequest,
                            "this output constraint cannot be sent to the engine worker"};
      return r;
    }
  }
  uint64_t id;
  std::vector<std::shared_ptr<engine::EventChannel>> chs;
  {
    std::lock_guard lock(mu_);
    if (stopping_) {
      r.error = SubmitError{SubmitError::Kind::ShuttingDown, "the engine is stopping"};
      return r;
    }
    if (state_ != State::Up) {
      r.error = SubmitError{SubmitError::Kind::EngineUnavailable,
                            "the engine worker is restarting; retry shortly"};
      return r;
    }
    id = next_id_;
    next_id_ += static_cast<uint64_t>(n);
    for (int32_t i = 0; i < n; ++i) {
      auto ch = std::make_shared<engine::EventChannel>(id + i, event_queue_capacity_);
      Live l;
      l.ch = ch;
      l.base = id;
      live_[id + i] = std::move(l);
      chs.push_back(std::move(ch));
    }
  }
  m.id = id;
  m.prompt = std::move(req.prompt);
  m.sampling = std::move(req.sampling);
  m.max_tokens = req.max_tokens;
  m.n = n;
  if (req.deadline) {
    m.deadline_ms =
        std::max<int64_t>(0, std::chrono::duration_cast<Ms>(*req.deadline - Clock::now()).count());
  }
  const bool sent = send(proto::encode(m));
  std::unique_lock lock(mu_);
  auto it = live_.find(id);
  if (sent && it != live_.end()) {
    cv_.wait_for(lock, opts_.submit_timeout,
                 [&] { return it->second.admission != Admission::Pending; });
  }
  if (it != live_.end() && it->second.admission == Admission::Accepted) {
    r.stream = std::make_shared<SubprocessStream>(chs[0], weak_from_this());
    for (size_t i = 1; i < chs.size(); ++i) {
      r.forks.push_back(std::make_shared<SubprocessStream>(chs[i], weak_from_this()));
    }
    for (int32_t i = 0; i < n; ++i) {  // from here on, a Done erases the entry
      auto c = live_.find(id + i);
      if (c == live_.end()) continue;
      c->second.claimed = true;
      if (c->second.ended) live_.erase(c);
    }
    return r;
  }
  if (it != live_.end() && it->second.admission == Admission::Rejected) {
    r.error = it->second.rejection;
  } else {
    r.error = SubmitError{SubmitError::Kind::EngineUnavailable,
                          sent ? "the engine worker did not answer; retry shortly"
                               : "the engine worker is gone; retry shortly"};
    if (sent && it != live_.end()) {
      lock.unlock();
      for (int32_t i = 0; i < n; ++i)
        send(proto::encode(proto::Cancel{id + i, CancelCause::Client}));
      lock.lock();
    }
  }
  for (int32_t i = 0; i < n; ++i) live_.erase(id + i);
  return r;
}

engine::WarmReport SubprocessEngineClient::save_warm() {
  uint64_t ticket;
  pid_t pid;
  {
    std::lock_guard lock(mu_);
    if (state_ != State::Up || stopping_) return {.message = "the engine worker is not running"};
    ticket = ++warm_asked_;
    pid = child_ ? child_->pid() : 0;
  }
  if (!send(proto::encode(proto::SaveWarm{}))) return {.message = "the engine worker is gone"};
  std::unique_lock lock(mu_);
  // The worker answers in order; a worker that dies (or is replaced) never will.
  const bool answered = cv_.wait_for(lock, std::chrono::minutes(5), [&] {
    const pid_t now = child_ ? child_->pid() : 0;
    return warm_answered_ >= ticket || state_ != State::Up || now != pid;
  });
  if (answered && warm_answered_ >= ticket) return last_warm_;
  return {.message = "the engine worker did not finish saving"};
}

void SubprocessEngineClient::stream_dropped(uint64_t id) {
  {
    std::lock_guard lock(mu_);
    if (!live_.count(id)) return;  // already ended
  }
  send(proto::encode(proto::Cancel{id, CancelCause::Client}));
}

void SubprocessEngineClient::cancel(uint64_t id, CancelCause cause) {
  {
    std::lock_guard lock(mu_);
    if (!live_.count(id)) return;
  }
  send(proto::encode(proto::Cancel{id, cause}));
}

int SubprocessEngineClient::cancel_all(CancelCause cause) {
  int n;
  {
    std::lock_guard lock(mu_);
    n = static_cast<int>(live_.size());
  }
  if (n > 0) send(proto::encode(proto::Cancel{0, cause}));
  return n;
}

EngineStats SubprocessEngineClient::stats() const {
  std::lock_guard lock(mu_);
  EngineStats s = last_stats_;
  s.worker_restarts = restarts_;
  s.available = state_ == State::Up && !stopping_;
  return s;
}

pid_t SubprocessEngineClient::worker_pid() const {
  std::lock_guard lock(mu_);
  return child_ ? child_->pid() : 0;
}

void SubprocessEngineClient::kill_now() {
  std::shared_ptr<process::Child> child;
  {
    std::lock_guard lock(mu_);
    child = child_;
  }
  if (child) child->signal_group(SIGKILL);
}

void SubprocessEngineClient::shutdown() {
  std::shared_ptr<process::Child> child;
  {
    std::lock_guard lock(mu_);
    if (stopping_ && state_ == State::Stopped) return;
    if (stopping_) return;  // another thread is shutting down
    stopping_ = true;
    state_ = State::Stopping;
    child = child_;
    cv_.notify_all();
  }
  std::string how = "no worker was running";
  if (child) {
    process::ChildStopper stopper(*child);
    auto out = process::run_stop_ladder(stopper, opts_.ladder,
                                        fmt::format("engine worker {}", child->pid()));
    how = fmt::format("rung {} ({})", process::rung_name(out.rung),
                      out.status ? out.status->describe() : "not reaped");
  }
  if (supervisor_.joinable()) supervisor_.join();
  std::lock_guard lock(mu_);
  end_all(ended(FinishReason::Cancelled, CancelCause::Shutdown,
                "the engine stopped before the request finished", false));
  child_.reset();
  state_ = State::Stopped;
  stop_description_ = how;
  cv_.notify_all();
}

std::string SubprocessEngineClient::stop_description() const {
  std::lock_guard lock(mu_);
  return stop_description_;
}

}  // namespace ember::worker
