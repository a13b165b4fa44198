// Internal to the server: the shared state behind Server (server.cc), the connection loop and
// routes (session.cc), the completion and messages handlers (completion.cc, messages.cc) and the
// request pipeline it runs on (generation.h, submission.h). Not part of the interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "server/api_error.h"
#include "server/drain.h"
#include "server/openai_request.h"
#include "server/progress.h"
#include "server/server.h"

namespace ember::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;

// One client connection; touched only on its strand.
struct Conn {
  explicit Conn(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  beast::flat_buffer buf;  // unparsed bytes (also where the disconnect watcher reads to)
  bool idle = true;        // waiting for the next request head
  int served = 0;          // requests answered; a drain closes idle connections with served > 0
                           // (a new one is answered 503 instead: its client already committed)
};

struct Server::Impl {
  explicit Impl(ServerOptions o);
  ~Impl();

  // Declared first: destroyed last, after the members that coroutine frames may touch.
  std::unique_ptr<asio::io_context> ioc;
  ServerOptions opts;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  // drain loop, acceptor; optional so ~Impl can drop it before the io_context (a
  // strand outliving its io_context locks a destroyed mutex: found by TSan)
  std::optional<asio::strand<asio::io_context::executor_type>> control;
  std::optional<tcp::acceptor> acceptor;
  std::vector<std::thread> threads;
  // Compiles output constraints for an engine in this process, off the I/O threads
  // (generation.cc); after `ioc`, so it is joined before the io_context goes.
  asio::thread_pool compile_pool{1};
  Metrics metrics;

  mutable std::mutex mu;  // guards model, load_error, progress
  std::shared_ptr<ServedModel> model;
  std::string load_error;
  ProgressMonitor progress;

  std::atomic<bool> is_ready{false};
  std::atomic<bool> is_draining{false};
  std::atomic<bool> cut_off{false};
  std::atomic<bool> listening{false};    // listen(2) done (at once, or at ready with reuse_port)
  std::atomic<bool> handed_over{false};  // reuse_port: the listener closed after the handover
  bool accepting = false;                // accept_loop is running (control strand only)
  // While accept_loop pauses after a failed accept (EMFILE...): its timer (control strand only).
  asio::steady_timer* accept_pause = nullptr;
  std::atomic<bool> accept_paused{false};
  std::atomic<int> handover_accepts{0};  // connections taken while handing the port over
  std::atomic<int> in_flight{0};
  std::atomic<int> drain_in_flight{0};  // requests in flight when the drain began
  std::atomic<int> drain_cancelled{0};  // requests the drain deadline cancelled
  DrainController drain;                // control strand only

  std::mutex reg_mu;  // guards conns
  uint64_t next_conn = 0;
  std::map<uint64_t, std::weak_ptr<Conn>> conns;

  std::mutex done_mu;
  std::condition_variable done_cv;
  std::optional<int> exit_code;

  std::shared_ptr<ServedModel> current_model() const {
    std::lock_guard lock(mu);
    return model;
  }
  void finish(int code);
  void start_drain();    // control strand
  void request_drain();  // any thread: begin the drain unless it has begun (idempotent)
  asio::awaitable<void> accept_loop();
  // Pause bounds after a failed accept: doubles from the first to the second while accepts
  // keep failing; a closed connection ends a pause early (on_connection_closed).
  static constexpr std::chrono::milliseconds kAcceptBackoffFirst{10};
  static constexpr std::chrono::milliseconds kAcceptBackoffMax{1000};
  void wake_accept();           // control strand: end an accept pause now
  void on_connection_closed();  // any thread: a session closed its socket (a descriptor is free)
  Status open_listener();       // control strand (or before start): listen(2), then accept
  void hand_over();             // control strand: steer new connections away, close after handover
  asio::awaitable<void> drain_loop();
  // A connection taken from the listener: registered in `conns`, its session spawned.
  void adopt(tcp::socket sock);
  size_t live_sessions();  // registered connections whose session still runs
  // After the last request of a drain, how long answers still being written may take.
  static constexpr std::chrono::milliseconds kSessionsGrace{2000};
  bool engine_healthy();  // liveness by progress
  // Whether the connection stays open after the answer to `req`: the client asks for it and the
  // server is not draining. The one owner of that decision for every kind of answer; the
  // session loop also stops at a drain that began while the answer was written.
  bool keeps_connection(const Request& req) const { return req.keep_alive() && !is_draining; }
  // Accepting completions: loaded, not draining, and the engine (worker) is up.
  bool serving_ready() {
    if (!is_ready || is_draining) return false;
    auto m = current_model();
    return m && m->engine->stats().available;
  }
};

// session.cc
asio::awaitable<void> run_session(Server::Impl& s, std::shared_ptr<Conn> c, uint64_t conn_id);
struct Reply {
  http::status status = http::status::ok;
  std::string content_type;
  std::string body;
  int retry_after_s = 0;  // 0: no Retry-After header
  std::string allow;      // the Allow header (405 answers and preflights); empty: none
};
Reply error_reply(const ApiError& e);
// Writes a whole response and counts it in the metrics; returns whether to keep the connection.
// Pass named values only: no temporaries inside a co_await expression (GCC 12 coroutine bug).
asio::awaitable<bool> send_reply(Server::Impl& s, Conn& c, const Request& req,
                                 std::string_view route, const Reply& reply);

// CORS: adds Access-Control-Allow-Origin (and Vary) when the request's Origin is allowed.
void add_cors_headers(const Server::Impl& s, const Request& req, http::fields& out);

// completion.cc
asio::awaitable<bool> handle_completion(Server::Impl& s, std::shared_ptr<Conn> c,
                                        const Request& req, Endpoint endpoint,
                                        std::string_view route);

// messages.cc: POST /v1/messages (Anthropic Messages), or /v1/messages/count_tokens.
asio::awaitable<bool> handle_messages(Server::Impl& s, std::shared_ptr<Conn> c, const Request& req,
                                      bool count_tokens, std::string_view route);

}  // namespace ember::server
