// `ember serve`'s own process settings (the front: HTTP, drain, supervision of the worker),
// declared once in serve_settings_table(): the struct's initializers are the only defaults.
// The engine's settings are worker::EngineSettings, with their own table; `ember serve` offers
// both sets of flags. server_options() and supervision() turn the settings into the options of
// the layers below, which declare no defaults of their own for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/settings.h"
#include "server/server.h"
#include "text/text_codec.h"
#include "worker/subprocess_client.h"

namespace ember::cli {

struct ServeSettings {
  std::string host = "127.0.0.1";
  int32_t port = 8080;
  std::string engine = "subprocess";  // or "in-process"
  double drain_timeout_s = 30;
  double cutoff_grace_s = 5;
  double engine_drain_s = 30;
  double engine_term_wait_s = 5;
  std::string api_key;
  std::string admin_key;
  std::vector<std::string> served_model_names;
  std::vector<std::string> cors_origins;
  int64_t max_body_bytes = 4 << 20;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double write_timeout_s = 30;
  int64_t send_buffer_bytes = 0;  // SO_SNDBUF per connection; 0: the kernel's
  std::string system_prompt = text::kDefaultSystemPrompt;
  int32_t max_tokens = 4096;
  bool no_web_ui = false;
  bool reuse_port = false;  // SO_REUSEPORT: share the port with a successor (`ember restart`)
  double handover_s = 1;
  int32_t io_threads = 2;
  double stall_limit_s = 60;
  std::string log_level = "info";
  std::string pid_file;
  std::string notify_socket;  // systemd: $NOTIFY_SOCKET
  int64_t watchdog_usec = 0;  // systemd: $WATCHDOG_USEC
  double restart_backoff_s = 0.25;
  int64_t successor_of = 0;  // `ember restart`: the pid whose pid file this server takes over
  std::vector<std::string> test_worker_flags;  // test only: extra `ember engine` flags
  double test_accept_delay_s = 0;              // test only: ServerOptions::test_accept_delay
};

const settings::Table<ServeSettings>& serve_settings_table();

// The HTTP server's options: every field from `s`.
server::ServerOptions server_options(const ServeSettings& s);

// The engine worker's supervision (the stop ladder's windows, the restart backoff) from `s`;
// the other fields of `so` are left as they are.
void set_supervision(const ServeSettings& s, worker::SubprocessOptions& so);

}  // namespace ember::cli
