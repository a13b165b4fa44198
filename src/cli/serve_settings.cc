#include "cli/serve_settings.h"

namespace ember::cli {
namespace {

std::chrono::milliseconds ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

const settings::Table<ServeSettings>& serve_settings_table() {
  static const auto table = [] {
    settings::Table<ServeSettings> t;
    using S = ServeSettings;
    t.add("--host", &S::host, "EMBER_HOST", "address to listen on");
    t.add("--port", &S::port, "EMBER_PORT", "TCP port (0: an ephemeral port, printed at start)")
        .range(0, 65535);
    t.add("--engine", &S::engine, "EMBER_ENGINE",
          "where the engine runs: 'subprocess' (a worker process, restarted if it dies) or "
          "'in-process'");
    t.add("--drain-timeout", &S::drain_timeout_s, "EMBER_DRAIN_TIMEOUT",
          "seconds in-flight requests may keep running after SIGTERM/SIGINT")
        .at_least(0);
    t.add("--cutoff-grace", &S::cutoff_grace_s, "EMBER_CUTOFF_GRACE",
          "seconds requests cut off by the drain deadline get to write their honest endings")
        .at_least(0);
    t.add("--engine-drain", &S::engine_drain_s, "EMBER_ENGINE_DRAIN_S",
          "seconds the engine worker gets to finish and save its state after its stdin closes, "
          "before SIGTERM")
        .at_least(0);
    t.add("--engine-term-wait", &S::engine_term_wait_s, "EMBER_ENGINE_TERM_WAIT",
          "seconds between SIGTERM and SIGKILL to the engine worker")
        .at_least(0);
    t.add("--api-key", &S::api_key, "EMBER_API_KEY",
          "require 'Authorization: Bearer KEY' on /v1 routes")
        .redact();
    t.add("--admin-key", &S::admin_key, "EMBER_ADMIN_KEY",
          "enable POST /admin/shutdown for 'Authorization: Bearer KEY'")
        .redact();
    t.add("--served-model-name", &S::served_model_names, "EMBER_SERVED_MODEL_NAME",
          "model names clients may ask for (default: the GGUF's general.name); 'default' is "
          "always accepted");
    t.add("--cors-origins", &S::cors_origins, "EMBER_CORS_ORIGINS",
          "origins browsers may call from (CORS), e.g. https://app.example; '*': any; default: "
          "none");
    t.add("--max-body-bytes", &S::max_body_bytes, "EMBER_MAX_BODY_BYTES",
          "largest request body; beyond: 413")
        .range(1024, double(int64_t{1} << 32));
    t.add("--header-timeout", &S::header_timeout_s, "EMBER_HEADER_TIMEOUT",
          "seconds to receive a whole request head (defeats slow-loris clients)")
        .at_least(0.001);
    t.add("--body-timeout", &S::body_timeout_s, "EMBER_BODY_TIMEOUT",
          "seconds to receive a whole request body")
        .at_least(0.001);
    t.add("--write-timeout", &S::write_timeout_s, "EMBER_WRITE_TIMEOUT",
          "seconds one write of an answer may take; a client that stops reading is cancelled "
          "as a slow consumer")
        .at_least(0.001);
    t.add("--send-buffer", &S::send_buffer_bytes, "EMBER_SEND_BUFFER",
          "bytes of kernel send buffer per connection (SO_SNDBUF), which bounds what is "
          "generated for a client that stopped reading before --write-timeout starts; 0: the "
          "kernel's own, autotuned up to net.ipv4.tcp_wmem's maximum")
        .range(0, 1 << 26);
    t.add("--system-prompt", &S::system_prompt, "EMBER_SYSTEM_PROMPT",
          "system prompt for chats that bring none (\"\": none)");
    t.add("--max-tokens", &S::max_tokens, "EMBER_MAX_TOKENS",
          "most tokens generated for a request that sets no max_tokens (the context bounds "
          "every request)")
        .range(1, 1 << 30);
    t.add("--no-web-ui", &S::no_web_ui, "EMBER_NO_WEB_UI", "do not serve the chat page at /");
    t.add("--reuse-port", &S::reuse_port, "EMBER_REUSE_PORT",
          "share the port with a successor (SO_REUSEPORT; `ember restart`): listen once the "
          "model is loaded, hand new connections over at drain");
    t.add("--handover", &S::handover_s, "EMBER_HANDOVER",
          "seconds a draining --reuse-port server still takes the connections queued to it")
        .range(0, 60);
    t.add("--io-threads", &S::io_threads, "EMBER_IO_THREADS", "HTTP threads").range(1, 64);
    t.add("--stall-limit", &S::stall_limit_s, "EMBER_STALL_LIMIT",
          "seconds the engine may make no progress with work pending before /health reports "
          "unhealthy")
        .at_least(0.001);
    t.add("--log-level", &S::log_level, "EMBER_LOG_LEVEL",
          "trace, debug, info, warn, error or off");
    t.add("--pid-file", &S::pid_file, "EMBER_PID_FILE",
          "write the server's pid here (atomically; removed at exit) for `ember stop`");
    t.add("--notify-socket", &S::notify_socket, "NOTIFY_SOCKET",
          "systemd notify socket (set by systemd for Type=notify)")
        .hide();
    t.add("--watchdog-usec", &S::watchdog_usec, "WATCHDOG_USEC",
          "systemd watchdog interval in microseconds (set by systemd for WatchdogSec=)")
        .at_least(0)
        .hide();
    t.add("--successor-of", &S::successor_of, "EMBER_SUCCESSOR_OF",
          "set by `ember restart`: the pid of the server this one replaces (its pid file is "
          "taken over)")
        .at_least(0)
        .hide();
    t.add("--restart-backoff", &S::restart_backoff_s, "EMBER_RESTART_BACKOFF",
          "seconds before the first restart of a dead engine worker (doubles, up to 10 s)")
        .range(0.001, 60);
    t.add("--test-accept-delay", &S::test_accept_delay_s, "",
          "test only: seconds between taking a connection and registering it")
        .range(0, 10)
        .hide();
    t.add("--test-worker-flag", &S::test_worker_flags, "",
          "test only: extra flags for `ember engine` (--test-ignore-eof, --test-ignore-term)")
        .hide();
    return t;
  }();
  return table;
}

}  // namespace ember::cli

namespace ember::cli {

server::ServerOptions server_options(const ServeSettings& s) {
  server::ServerOptions so;
  so.host = s.host;
  so.port = static_cast<uint16_t>(s.port);
  so.io_threads = s.io_threads;
  so.api_key = s.api_key;
  so.admin_key = s.admin_key;
  so.max_body_bytes = static_cast<size_t>(s.max_body_bytes);
  so.header_timeout = ms(s.header_timeout_s);
  so.body_timeout = ms(s.body_timeout_s);
  so.write_timeout = ms(s.write_timeout_s);
  so.send_buffer_bytes = static_cast<size_t>(s.send_buffer_bytes);
  so.cors_origins = s.cors_origins;
  so.default_max_tokens = s.max_tokens;
  so.web_ui = !s.no_web_ui;
  so.drain_timeout = ms(s.drain_timeout_s);
  so.cutoff_grace = ms(s.cutoff_grace_s);
  so.stall_limit = ms(s.stall_limit_s);
  so.reuse_port = s.reuse_port;
  so.handover = ms(s.handover_s);
  so.test_accept_delay = ms(s.test_accept_delay_s);
  return so;
}

void set_supervision(const ServeSettings& s, worker::SubprocessOptions& so) {
  so.ladder.eof_wait = ms(s.engine_drain_s);
  so.ladder.term_wait = ms(s.engine_term_wait_s);
  so.backoff_initial = ms(s.restart_backoff_s);
}

}  // namespace ember::cli
