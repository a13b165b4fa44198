#include "worker/worker_loop.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "process/signal_pipe.h"
#include "worker/constraint.h"
#include "worker/protocol.h"

namespace ember::worker {
namespace {

using Clock = std::chrono::steady_clock;

bool write_all(int fd, std::span<const uint8_t> bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Everything that goes to stdout, and the one thread that writes it.
class Outbox {
 public:
  explicit Outbox(int fd) : fd_(fd), thread_([this] { run(); }) {}
  ~Outbox() { close(); }

  template <typename M>
  void send(const M& m) {
    std::lock_guard lock(mu_);
    proto::append(control_, m);
    cv_.notify_one();
  }
  // A request's events are relayed from now on, under the front's id.
  void add_stream(uint64_t id, std::shared_ptr<EventStream> s) {
    auto raw = s.get();
    {
      std::lock_guard lock(mu_);
      streams_[id] = std::move(s);
    }
    raw->set_waker([this, id] { mark_ready(id); });
    mark_ready(id);  // events pushed before the waker was set
  }
  std::optional<uint64_t> engine_id(uint64_t id) {
    std::lock_guard lock(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) return std::nullopt;
    return it->second->id();
  }
  size_t live() {
    std::lock_guard lock(mu_);
    return streams_.size();
  }
  // The source of Stats frames. Once set_stats({}) returns, the old source is not running and
  // is never called again: the worker clears it before it destroys the engine it reads.
  void set_stats(std::function<EngineStats()> f) {
    std::lock_guard lock(stats_mu_);
    stats_ = std::move(f);
  }
  bool broken() const { return broken_.load(); }
  // Writes what is queued, then stops the thread.
  void close() {
    {
      std::lock_guard lock(mu_);
      closing_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void mark_ready(uint64_t id) {
    std::lock_guard lock(mu_);
    ready_.push_back(id);
    cv_.notify_one();
  }

  // Calls the source under stats_mu_, so set_stats() waits out a call in progress.
  std::optional<EngineStats> stats() {
    std::lock_guard lock(stats_mu_);
    if (!stats_) return std::nullopt;
    return stats_();
  }

  void run() {
    std::vector<uint8_t> buf;
    std::vector<uint64_t> ready;
    std::vector<std::pair<uint64_t, std::shared_ptr<EventStream>>> work;
    auto next_stats = Clock::now();
    std::optional<EngineStats> last;
    for (;;) {
      bool closing;
      {
        std::unique_lock lock(mu_);
        cv_.wait_until(lock, next_stats,
                       [&] { return !control_.empty() || !ready_.empty() || closing_; });
        buf.swap(control_);
        ready.swap(ready_);
        closing = closing_;
        work.clear();
        for (uint64_t id : ready) {
          auto it = streams_.find(id);
          if (it != streams_.end()) work.emplace_back(id, it->second);
        }
        ready.clear();
      }
      for (auto& [id, s] : work) {
        while (auto ev = s->try_next()) {
          if (auto* t = std::get_if<TokenEvent>(&*ev)) {
            proto::append(buf, proto::Token{id, std::move(*t)});
          } else {
            // Stats first: the engine released the request before pushing its DoneEvent, so
            // a front that holds the Done already sees stats without it (engine.h's promise,
            // kept across the process boundary).
            if (auto st = stats()) proto::append(buf, proto::Stats{*st});
            proto::append(buf, proto::Done{id, std::get<DoneEvent>(*ev)});
            std::lock_guard lock(mu_);
            streams_.erase(id);
          }
        }
      }
      if (Clock::now() >= next_stats) {
        next_stats = Clock::now() + std::chrono::milliseconds(100);
        auto st = stats();
        if (st && (!last || st->steps != last->steps || st->active != last->active ||
                   st->queued != last->queued || st->kv_bytes != last->kv_bytes)) {
          proto::append(buf, proto::Stats{*st});
          last = st;
        }
      }
      if (!buf.empty() && !broken_ && !write_all(fd_, buf)) {
        log::error("engine worker: cannot write to the front: {}", strerror(errno));
        broken_ = true;
      }
      buf.clear();
      if (closing) {
        std::lock_guard lock(mu_);
        if (control_.empty() && ready_.empty()) return;
      }
    }
  }

  const int fd_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint8_t> control_;
  std::vector<uint64_t> ready_;
  std::map<uint64_t, std::shared_ptr<EventStream>> streams_;
  std::mutex stats_mu_;  // never held with mu_
  std::function<EngineStats()> stats_;
  bool closing_ = false;
  std::atomic<bool> broken_{false};
  std::thread thread_;  // last: starts after the members it uses
};

class Worker {
 public:
  Worker(const WorkerOptions& o, process::SignalPipe* sig) : o_(o), sig_(sig), out_(o.out_fd) {}

  int run() {
    std::vector<uint8_t> buf(64 * 1024);
    bool in_open = true;
    for (;;) {
      if (exit_code_) break;
      if (draining_ && out_.live() == 0) break;
      if (o_.parent_pid != 0 && ::getppid() != o_.parent_pid) {
        log::error("engine worker: the front (pid {}) is gone; exiting", o_.parent_pid);
        return 1;
      }
      pollfd fds[2] = {{in_open ? o_.in_fd : -1, POLLIN, 0}, {sig_ ? sig_->fd() : -1, POLLIN, 0}};
      int r = ::poll(fds, 2, draining_ ? 20 : 1000);
      if (r < 0 && errno != EINTR) {
        log::error("engine worker: poll: {}", strerror(errno));
        return 1;
      }
      if (sig_) {
        while (auto s = sig_->try_take()) on_signal(*s);
        if (exit_code_) break;
      }
      if (in_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t n = ::read(o_.in_fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
          in_open = false;
          on_eof();
          continue;
        }
        decoder_.feed({buf.data(), static_cast<size_t>(n)});
        drain_frames();
      }
    }
    if (exit_code_) {
      out_.close();
      return *exit_code_;
    }
    return finish();
  }

 private:
  void on_signal(int s) {
    if (s != SIGTERM && s != SIGINT) return;
    if (++terms_ > 1) {
      log::warn("engine worker: second signal: exiting now");
      ::_exit(128 + s);
    }
    log::info("engine worker: SIG{}: draining", sigabbrev_np(s));
    begin_drain();
  }

  void on_eof() {
    if (o_.ignore_eof) {
      log::warn("engine worker: EOF on stdin ignored (--test-ignore-eof)");
      return;
    }
    log::info("engine worker: EOF on stdin: draining");
    begin_drain();
  }

  void begin_drain() {
    if (draining_) return;
    draining_ = true;
    if (!engine_) {  // nothing loaded, nothing to finish
      exit_code_ = 0;
      return;
    }
    log::info("engine worker: draining {} request(s) in flight", out_.live());
  }

  int finish() {
    // Joins the engine thread once every stream has ended; the engine then saves its warm state
    // (EngineOptions::warm, from --warm-cache-dir): the point of draining on EOF. The outbox
    // stops reading the engine's stats first: it must not call into an engine being destroyed
    // (TSan caught the periodic Stats frame racing the engine's destructor and its warm save).
    out_.set_stats({});
    engine_.reset();
    out_.close();
    log::info("engine worker: drained; exiting {}", protocol_failed_ ? 2 : 0);
    return protocol_failed_ ? 2 : 0;
  }

  void drain_frames() {
    for (;;) {
      auto f = decoder_.next();
      if (!f) {
        log::error("engine worker: protocol error: {}", f.message());
        out_.send(proto::ProtocolError{f.message()});
        if (decoder_.fatal()) {
          protocol_failed_ = true;
          begin_drain();
          return;
        }
        continue;
      }
      if (!*f) return;
      handle(**f);
    }
  }

  template <typename M>
  std::optional<M> decode(const proto::Frame& f) {
    auto m = proto::decode<M>(f.payload);
    if (!m) {
      log::error("engine worker: {}", m.message());
      out_.send(proto::ProtocolError{m.message()});
      return std::nullopt;
    }
    return std::move(*m);
  }

  void handle(const proto::Frame& f) {
    switch (f.type) {
      case proto::Type::Configure:
        if (auto m = decode<proto::Configure>(f)) configure(*m);
        break;
      case proto::Type::Submit:
        if (auto m = decode<proto::Submit>(f)) submit(std::move(*m));
        break;
      case proto::Type::Cancel:
        if (auto m = decode<proto::Cancel>(f)) cancel(*m);
        break;
      case proto::Type::SaveWarm: {
        // On this (the reading) thread: the engine runs the save between two steps, so no
        // frame behind this one could take effect sooner anyway.
        proto::WarmSaved m;
        if (engine_) {
          m.report = engine_->save_warm_state();
        } else {
          m.report.message = "no model loaded";
        }
        out_.send(m);
        break;
      }
      case proto::Type::Stop:
        log::info("engine worker: stop frame: draining");
        begin_drain();
        break;
      default: {
        auto msg = fmt::format("unexpected {} frame from the front", proto::type_name(f.type));
        log::error("engine worker: {}", msg);
        out_.send(proto::ProtocolError{msg});
      }
    }
  }

  void configure(const proto::Configure& m) {
    if (engine_) {
      out_.send(proto::ProtocolError{"configure frame after the model was loaded: ignored"});
      return;
    }
    EngineSettings s;
    auto loaded = [&]() -> Result<LoadedModel> {
      EMBER_TRY_STATUS(engine_settings_table().apply(s, m.settings));
      log::info("engine worker: settings: {}", engine_settings_table().describe(s));
      return o_.load(s, m.eog_tokens);
    }();
    if (!loaded) {
      log::error("engine worker: {}", loaded.message());
      out_.send(proto::LoadFailed{loaded.message()});
      exit_code_ = 1;
      return;
    }
    if (o_.load_text) {
      auto t = o_.load_text(s);
      if (t) {
        text_ = std::move(*t);
      } else {
        log::warn("engine worker: no text codec ({}): constrained requests will fail", t.message());
      }
    }
    engine_ = std::make_unique<engine::Engine>(loaded->backend, loaded->options);
    engine::Engine* e = engine_.get();
    // Hello carries the stats at load (warm blocks loaded, before any step): the front takes
    // them with the model, so they are there once it reports ready.
    out_.send(proto::Hello{loaded->info, ::getpid(), from_engine(e->stats())});
    out_.set_stats([e] { return from_engine(e->stats()); });
    log::info("engine worker: model loaded (n_ctx {})", loaded->info.n_ctx);
  }

  void submit(proto::Submit m) {
    if (!engine_) {
      out_.send(proto::Rejected{m.id, {SubmitError::Kind::InvalidRequest, "no model loaded"}});
      return;
    }
    if (draining_) {
      out_.send(proto::Rejected{m.id, {SubmitError::Kind::ShuttingDown, "the engine is draining"}});
      return;
    }
    GenerateRequest g;
    g.prompt = std::move(m.prompt);
    g.sampling = m.sampling;
    g.max_tokens = m.max_tokens;
    g.n = m.n;
    if (m.deadline_ms >= 0) g.deadline = Clock::now() + std::chrono::milliseconds(m.deadline_ms);
    if (!m.constraint.empty()) {
      auto c = text_ ? constraint_from_spec(m.constraint, *text_)
                     : Result<std::shared_ptr<TokenConstraint>>(
                           fail("the engine worker has no vocabulary to build a constraint"));
      if (!c) {  // the one compile of this request's grammar: a refusal is the client's 400
        const auto kind =
            text_ ? SubmitError::Kind::BadConstraint : SubmitError::Kind::InvalidRequest;
        out_.send(proto::Rejected{m.id, {kind, c.message()}});
        return;
      }
      g.constraint = std::move(*c);
    }
    auto sub = engine_->submit(std::move(g));
    if (!sub.ok()) {
      out_.send(proto::Rejected{m.id, from_engine(*sub.error)});
      return;
    }
    out_.send(proto::Accepted{m.id});
    out_.add_stream(m.id, std::move(sub.stream));
    // Choice i of n > 1 travels under the front's id + i.
    for (size_t i = 0; i < sub.forks.size(); ++i) out_.add_stream(m.id + 1 + i, sub.forks[i]);
  }

  void cancel(const proto::Cancel& m) {
    if (!engine_) return;
    if (m.id == 0) {
      engine_->cancel_all(m.cause);
    } else if (auto eid = out_.engine_id(m.id)) {
      engine_->cancel(*eid, m.cause);
    }
  }

  const WorkerOptions& o_;
  process::SignalPipe* sig_;
  Outbox out_;
  std::shared_ptr<const text::TextCodec> text_;  // rebuilds constraints from their specs
  std::unique_ptr<engine::Engine> engine_;       // destroyed before out_ (its wakers point there)
  proto::FrameDecoder decoder_;
  bool draining_ = false;
  bool protocol_failed_ = false;
  int terms_ = 0;
  std::optional<int> exit_code_;
};

}  // namespace

int run_worker(const WorkerOptions& opts, process::SignalPipe* signals) {
  Worker w(opts, signals);
  return w.run();
}

}  // namespace ember::worker
