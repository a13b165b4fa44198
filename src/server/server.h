// The HTTP server of `ember serve`: Boost.Beast + Asio with C++20 coroutines on a few IO
// threads, one strand per connection. Routes: POST /v1/chat/completions, POST /v1/completions,
// GET /v1/models, GET /v1/models/{id}, /health, /ready, /metrics; OPTIONS (CORS preflight) on
// every route, answered before authentication.
//
// Lifecycle: listen() binds (port 0: ephemeral) and start() serves at once — before the model
// is loaded (/health says "loading", completions answer 503) — then set_model() makes it ready.
// The server installs no signal handler: its owner (ember serve) handles SIGINT/SIGTERM on a
// self-pipe thread that outlives the IO threads and calls begin_drain(); a second signal is
// the owner's to act on. POST /admin/shutdown (with --admin-key) begins the same drain.
// wait() returns the exit code once the drain is complete and the engine has shut down.
//
// Threading: IO threads never block on the engine. The engine's EventStream waker posts to the
// connection's strand. Each completion owns its EventStream (dropping it cancels), and a read on
// the socket while the answer is produced notices a client that goes away.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "server/metrics.h"
#include "text/text_codec.h"
#include "worker/engine_client.h"

namespace ember::server {

// No defaults here: `ember serve` fills every field from its settings table
// (cli/serve_settings.h, server_options()), the one place a default lives.
struct ServerOptions {
  std::string host;
  uint16_t port{};
  int io_threads{};
  std::string api_key;    // empty: no auth
  std::string admin_key;  // empty: no POST /admin/shutdown
  size_t max_body_bytes{};
  std::chrono::milliseconds header_timeout{};  // whole request head, from the first byte
  std::chrono::milliseconds body_timeout{};    // whole body
  // Each write of an answer (a response, an SSE event); past it the client is a slow consumer:
  // the request is cancelled and the connection closed.
  std::chrono::milliseconds write_timeout{};
  // SO_SNDBUF of each connection (--send-buffer); 0: the kernel's, which on Linux grows with
  // the connection up to net.ipv4.tcp_wmem's maximum (4 MiB by default). A client that stops
  // reading is seen only once that buffer is full: every token written into it was generated
  // for nobody (about 1,800 tokens of an SSE stream with logprobs at 4 MiB).
  size_t send_buffer_bytes{};
  std::chrono::milliseconds drain_timeout{};
  std::chrono::milliseconds cutoff_grace{};  // for honest endings after the deadline
  std::chrono::milliseconds stall_limit{};   // liveness: steps still with work pending
  // Origins browsers may call from (CORS); empty: none; "*": any.
  std::vector<std::string> cors_origins;
  int32_t default_max_tokens{};  // for a request that sets no max_tokens (--max-tokens)
  bool web_ui{};                 // the chat page at / (--no-web-ui: off)
  // --reuse-port (SO_REUSEPORT): a successor can bind the same port while this server drains
  // (`ember restart`). The listener opens only once the model is loaded (so the kernel never
  // hands a connection to a server that is still loading); at drain new connections are
  // steered to the other listener on the port, the ones already queued here are taken and
  // served during `handover`, then the listener closes.
  bool reuse_port{};
  std::chrono::milliseconds handover{};
  // Test only (`--test-accept-delay`): the accept loop waits this long between taking a
  // connection and registering it, logging "test: accepted a connection from port P", so that a
  // test can drain the server while an accepted connection is not yet registered.
  std::chrono::milliseconds test_accept_delay{};
};

struct ServedModel {
  std::shared_ptr<worker::EngineClient> engine;
  std::shared_ptr<const text::TextCodec> text;
  std::vector<std::string> names;  // the ids /v1/models lists; `model` must be one of them
  int64_t created = 0;             // unix seconds
};

// What the drain did, for `ember stop`'s report.
struct DrainReport {
  bool drained = false;  // a drain ran (signal, begin_drain or /admin/shutdown)
  int in_flight = 0;     // requests in flight when it began
  int cancelled = 0;     // of those, cut off by the drain deadline
};

class Server {
 public:
  explicit Server(ServerOptions opts);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  Result<uint16_t> listen();  // the bound port
  void start();               // IO threads, accept loop
  void set_model(std::shared_ptr<ServedModel> model);
  void set_load_failed(std::string message);  // wait() then returns 1
  // What the first signal does; idempotent (a second call does not exit: the owner counts
  // signals).
  void begin_drain();
  int wait();  // blocks until drained (0) or load failed (1); shuts the engine down

  Metrics& metrics();
  bool ready() const;
  bool draining() const;
  bool healthy();  // liveness by engine progress (what /health reports; systemd's watchdog)
  DrainReport drain_report() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// Constant-time comparison (API keys): time depends on the lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace ember::server
