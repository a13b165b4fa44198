#include "server/server.h"

#include <linux/filter.h>
#include <sys/socket.h>

#include <future>

#include "base/log.h"
#include "server/server_impl.h"

namespace ember::server {

using Clock = std::chrono::steady_clock;

bool constant_time_equal(std::string_view a, std::string_view b) {
  // Every byte of the longer string is visited whatever the contents: no early exit.
  size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

Server::Impl::Impl(ServerOptions o)
    : ioc(std::make_unique<asio::io_context>(std::max(1, o.io_threads))),
      opts(std::move(o)),
      control(std::in_place, asio::make_strand(*ioc)),
      progress(opts.stall_limit),
      drain(opts.drain_timeout, opts.cutoff_grace) {}

Server::Impl::~Impl() {
  work.reset();
  ioc->stop();
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
  acceptor.reset();
  control.reset();
  // Destroys pending coroutine frames while everything they reference is still alive.
  ioc.reset();
}

void Server::Impl::finish(int code) {
  std::lock_guard lock(done_mu);
  if (!exit_code) exit_code = code;
  done_cv.notify_all();
}

bool Server::Impl::engine_healthy() {
  auto m = current_model();
  std::lock_guard lock(mu);
  if (!m) return progress.healthy();
  auto st = m->engine->stats();
  return progress.observe(Clock::now(), st.steps, int64_t{st.queued} + st.active);
}

void Server::Impl::start_drain() {
  is_draining = true;
  drain_in_flight = in_flight.load();
  log::info("ember: draining: {} request(s) in flight, deadline in {} ms", in_flight.load(),
            opts.drain_timeout.count());
  std::vector<std::shared_ptr<Conn>> live;
  {
    std::lock_guard lock(reg_mu);
    for (auto& [id, w] : conns) {
      if (auto c = w.lock()) live.push_back(std::move(c));
    }
  }
  for (auto& c : live) {
    asio::post(c->stream.get_executor(), [c] {
      if (c->idle && c->served > 0) c->stream.cancel();  // an idle keep-alive connection
    });
  }
  if (opts.reuse_port && listening) hand_over();
  asio::co_spawn(*control, drain_loop(), asio::detached);
}

// With SO_REUSEPORT the kernel picks a listener per connection. A classic BPF program on the
// port's group returning 1 sends every new connection to the socket at index 1: the successor,
// since this server bound first (the group keeps its sockets in order of joining, and moves
// the last into a leaver's place, so the older of two is always index 0). With no successor
// the index is out of range and the kernel falls back to its hash: nothing changes. A
// connection already queued here, or whose handshake began before the program, is still ours:
// the accept loop keeps taking them during `handover`, then the listener closes. (Linux can
// migrate a closed listener's queue itself with net.ipv4.tcp_migrate_req=1; this works
// without it.)
void Server::Impl::hand_over() {
  sock_filter code[] = {{BPF_RET | BPF_K, 0, 0, 1}};
  sock_fprog prog{1, code};
  if (::setsockopt(acceptor->native_handle(), SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF, &prog,
                   sizeof prog) != 0) {
    log::warn("ember: cannot steer new connections to the successor: {}", std::strerror(errno));
  }
  log::info("ember: handing the port over: closing the listener in {} ms", opts.handover.count());
  auto timer = std::make_shared<asio::steady_timer>(*control, opts.handover);
  timer->async_wait([this, timer](const boost::system::error_code&) {
    boost::system::error_code ec;
    acceptor->close(ec);
    handed_over = true;
    log::info(
        "ember: listener closed after taking {} connection(s) during the handover; the "
        "port is the successor's",
        handover_accepts.load());
  });
}

Status Server::Impl::open_listener() {
  boost::system::error_code ec;
  if (acceptor->listen(asio::socket_base::max_listen_connections, ec); ec) {
    return fail("listen on {}:{}: {}", opts.host, opts.port, ec.message());
  }
  listening = true;
  return {};
}

asio::awaitable<void> Server::Impl::drain_loop() {
  asio::steady_timer timer(*control);
  for (;;) {
    // With a handover the open listener counts as work: a connection it queued is still ours.
    const bool handing_over = opts.reuse_port && listening && !handed_over;
    auto step = drain.poll(Clock::now(), in_flight.load() + (handing_over ? 1 : 0));
    if (step.cut_off) {
      cut_off = true;
      int n = 0;
      if (auto m = current_model()) n = m->engine->cancel_all(worker::CancelCause::Shutdown);
      drain_cancelled = n;
      log::warn("ember: drain deadline passed: cancelled {} request(s)", n);
    }
    if (step.done) {
      // Nothing is in flight, but connections taken during the drain may still be reading
      // their request or writing its 503: stop taking new ones first (what the kernel queued
      // is taken now, not reset by the close), then let those answers go out, for at most
      // kSessionsGrace. Finishing with them open cut them off: behind nginx a POST on such a
      // connection was a 502 it does not retry (tests/integration/test_rolling_restart.py).
      const auto sessions_deadline = Clock::now() + kSessionsGrace;
      if (acceptor && acceptor->is_open()) {
        boost::system::error_code ec;
        acceptor->non_blocking(true, ec);
        for (;;) {
          tcp::socket sock(asio::make_strand(*ioc));
          if (acceptor->accept(sock, ec); ec) break;
          adopt(std::move(sock));
        }
        acceptor->close(ec);
        wake_accept();  // a paused accept loop sees the closed listener and ends
      }
      // An accept the reactor finished before the close is still waiting for this strand:
      // let it register its connection before the count below.
      while (accepting && Clock::now() < sessions_deadline) {
        timer.expires_after(std::chrono::milliseconds(1));
        co_await timer.async_wait(asio::use_awaitable);
      }
      if (const size_t open = live_sessions(); open > 0) {
        log::info(
            "ember: drain: {} connection(s) still open: waiting up to {} ms for their answers",
            open, kSessionsGrace.count());
      }
      while (live_sessions() > 0 && Clock::now() < sessions_deadline) {
        timer.expires_after(std::chrono::milliseconds(5));
        co_await timer.async_wait(asio::use_awaitable);
      }
      log::info("ember: drain complete");
      finish(0);
      co_return;
    }
    timer.expires_after(std::chrono::milliseconds(20));
    co_await timer.async_wait(asio::use_awaitable);
  }
}

size_t Server::Impl::live_sessions() {
  std::lock_guard lock(reg_mu);
  size_t n = 0;
  for (auto& [id, w] : conns) n += w.expired() ? 0 : 1;
  return n;
}

void Server::Impl::adopt(tcp::socket sock) {
  boost::system::error_code ec;
  sock.set_option(tcp::no_delay(true), ec);
  if (opts.send_buffer_bytes > 0) {
    sock.set_option(asio::socket_base::send_buffer_size(static_cast<int>(opts.send_buffer_bytes)),
                    ec);
    if (ec) log::warn("ember: --send-buffer {}: {}", opts.send_buffer_bytes, ec.message());
  }
  if (is_draining) ++handover_accepts;
  auto c = std::make_shared<Conn>(std::move(sock));
  uint64_t id;
  {
    std::lock_guard lock(reg_mu);
    id = next_conn++;
    conns[id] = c;
  }
  auto ex = c->stream.get_executor();
  asio::co_spawn(ex, run_session(*this, std::move(c), id), asio::detached);
}

namespace {

// The label of ember_accept_errors_total for a failed accept.
std::string_view accept_error_reason(const boost::system::error_code& ec) {
  if (ec == boost::system::errc::too_many_files_open) return "emfile";
  if (ec == boost::system::errc::too_many_files_open_in_system) return "enfile";
  if (ec == boost::system::errc::no_buffer_space || ec == boost::system::errc::not_enough_memory) {
    return "nomem";
  }
  return "other";
}

}  // namespace

// A failed accept leaves the connection in the listen queue, so retrying at once fails again at
// once: out of descriptors (EMFILE), the loop spun at full CPU and starved the sessions whose
// closing would have freed one. Instead it pauses until one of our connections closes (its
// descriptor is what the next accept needs) or the backoff passes (a descriptor freed elsewhere,
// ENFILE), the backoff doubling from kAcceptBackoffFirst to kAcceptBackoffMax while accepts keep
// failing. Each failure is counted in ember_accept_errors_total{reason}.
asio::awaitable<void> Server::Impl::accept_loop() {
  accepting = true;
  auto backoff = kAcceptBackoffFirst;
  int failures = 0;  // in a row
  asio::steady_timer pause(*control);
  for (;;) {
    auto [ec, sock] = co_await acceptor->async_accept(asio::make_strand(*ioc),
                                                      asio::as_tuple(asio::use_awaitable));
    if (!ec && opts.test_accept_delay.count() > 0) {
      boost::system::error_code pec;
      log::info("ember: test: accepted a connection from port {}; registering it in {} ms",
                sock.remote_endpoint(pec).port(), opts.test_accept_delay.count());
      asio::steady_timer hold(*control, opts.test_accept_delay);
      co_await hold.async_wait(asio::use_awaitable);
    }
    // A connection taken before the listener closed is ours even if it closed since: the
    // reactor accepts on an IO thread, and the completion then waits for the control strand,
    // where the drain end (or the handover) may close the listener first. Dropping it reset a
    // client that was already connected (seen under TSan in test_lifecycle.py).
    if (!ec) adopt(std::move(sock));
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) {
      accepting = false;
      co_return;
    }
    if (!ec) {
      if (failures > 0) {
        log::info("ember: accepting connections again after {} failed accept(s)", failures);
      }
      failures = 0;
      backoff = kAcceptBackoffFirst;
      continue;
    }
    metrics.count_accept_error(accept_error_reason(ec));
    if (failures++ == 0) {
      log::warn(
          "ember: accept: {}: not accepting until a connection closes (or for up to {} ms); "
          "see the open-files limit in docs/operations.md",
          ec.message(), kAcceptBackoffMax.count());
    }
    pause.expires_after(backoff);
    accept_pause = &pause;
    accept_paused = true;
    co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    accept_paused = false;
    accept_pause = nullptr;
    backoff = std::min(backoff * 2, kAcceptBackoffMax);
  }
}

void Server::Impl::wake_accept() {
  if (accept_pause) accept_pause->cancel();
}

void Server::Impl::on_connection_closed() {
  if (accept_paused.load()) asio::post(*control, [this] { wake_accept(); });
}

Server::Server(ServerOptions opts) : impl_(std::make_shared<Impl>(std::move(opts))) {}

Server::~Server() = default;

Result<uint16_t> Server::listen() {
  Impl& s = *impl_;
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(s.opts.host, ec);
  if (ec) return fail("--host {}: not an IP address ({})", s.opts.host, ec.message());
  tcp::endpoint ep(addr, s.opts.port);
  s.acceptor.emplace(*s.control);
  if (s.acceptor->open(ep.protocol(), ec); ec) return fail("socket: {}", ec.message());
  s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (s.opts.reuse_port) {
    int one = 1;
    if (::setsockopt(s.acceptor->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof one)) {
      return fail("--reuse-port: setsockopt(SO_REUSEPORT): {}", std::strerror(errno));
    }
  }
  if (s.acceptor->bind(ep, ec); ec) {
    return fail("cannot listen on {}:{}: {}", s.opts.host, s.opts.port, ec.message());
  }
  // With --reuse-port the port is bound now (its errors reported at once) but listen(2), which
  // joins the port's group and so takes a share of the connections, waits for the model.
  if (!s.opts.reuse_port) {
    if (auto st = s.open_listener(); !st) return fail("{}", st.message());
  }
  return s.acceptor->local_endpoint().port();
}

void Server::start() {
  Impl& s = *impl_;
  EMBER_ASSERT(s.acceptor && s.acceptor->is_open());
  s.work.emplace(s.ioc->get_executor());
  if (s.listening) asio::co_spawn(*s.control, s.accept_loop(), asio::detached);
  for (int i = 0; i < std::max(1, s.opts.io_threads); ++i) {
    s.threads.emplace_back([&s] { s.ioc->run(); });
  }
}

void Server::set_model(std::shared_ptr<ServedModel> model) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->model = std::move(model);
  }
  impl_->is_ready = true;
  Impl* s = impl_.get();
  if (s->opts.reuse_port) {
    // Synchronous: once set_model returns (and the caller reports ready, e.g. to `ember
    // restart`), this server is in the port's group, so a predecessor may hand over.
    std::promise<void> joined;
    asio::post(*s->control, [s, &joined] {
      if (!s->listening && !s->is_draining && s->acceptor->is_open()) {
        if (auto st = s->open_listener(); !st) {
          log::error("ember: {}", st.message());
          s->finish(1);
        } else {
          log::info("ember: listening (--reuse-port: joined the port's listeners)");
          asio::co_spawn(*s->control, s->accept_loop(), asio::detached);
        }
      }
      joined.set_value();
    });
    joined.get_future().wait();
  }
}

void Server::set_load_failed(std::string message) {
  {
    std::lock_guard lock(impl_->mu);
    impl_->load_error = std::move(message);
  }
  impl_->finish(1);
}

void Server::Impl::request_drain() {
  asio::post(*control, [this] {
    if (drain.draining()) return;
    drain.on_signal(Clock::now());
    start_drain();
  });
}

void Server::begin_drain() {
  impl_->request_drain();
}

int Server::wait() {
  Impl& s = *impl_;
  int code;
  {
    std::unique_lock lock(s.done_mu);
    s.done_cv.wait(lock, [&] { return s.exit_code.has_value(); });
    code = *s.exit_code;
  }
  asio::post(*s.control, [&s] {
    boost::system::error_code ec;
    if (s.acceptor) s.acceptor->close(ec);
  });
  if (auto m = s.current_model()) m->engine->shutdown();
  s.is_ready = false;
  s.work.reset();
  s.ioc->stop();
  for (auto& t : s.threads) {
    if (t.joinable()) t.join();
  }
  return code;
}

Metrics& Server::metrics() {
  return impl_->metrics;
}
bool Server::ready() const {
  return impl_->serving_ready();
}
DrainReport Server::drain_report() const {
  return {impl_->is_draining.load(), impl_->drain_in_flight.load(), impl_->drain_cancelled.load()};
}
bool Server::healthy() {
  return impl_->engine_healthy();
}
bool Server::draining() const {
  return impl_->is_draining;
}

}  // namespace ember::server
