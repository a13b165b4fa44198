// `ember engine`: the engine worker. Started by `ember serve` in its own process
// group; speaks the worker protocol on stdin/stdout and logs to stderr. The engine's settings
// arrive in the protocol's Configure frame, not on the command line; the flags here are about
// the process itself. See worker/worker_loop.h for the lifecycle.
// See docs/architecture.md, "Worker protocol".
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>

#include "base/log.h"
#include "cli/commands.h"
#include "process/child.h"
#include "process/signal_pipe.h"
#include "worker/worker_loop.h"

namespace ember::cli {

int cmd_engine(int argc, char** argv) {
  CLI::App app{"The engine worker behind the worker protocol (started by `ember serve`)",
               "ember engine"};
  int64_t parent_pid = 0;
  bool ignore_eof = false;
  bool ignore_term = false;
  std::string log_level = "info";
  app.add_option("--parent-pid", parent_pid, "exit at once when this process (the front) is gone");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->envname("EMBER_LOG_LEVEL")
      ->capture_default_str();
  app.add_flag("--test-ignore-eof", ignore_eof, "test only: EOF on stdin does not drain")
      ->group("");
  app.add_flag("--test-ignore-term", ignore_term, "test only: ignore SIGTERM")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  log::init(log_level);  // before anything logs: stdout carries the protocol only
  std::signal(SIGPIPE, SIG_IGN);
  if (parent_pid > 0) {
    if (auto st = process::exit_with_parent(static_cast<pid_t>(parent_pid)); !st) {
      log::error("engine worker: {}; exiting", st.message());
      return 1;
    }
  }
  if (ignore_term) std::signal(SIGTERM, SIG_IGN);
  auto sig = ignore_term ? process::SignalPipe::install({SIGINT})
                         : process::SignalPipe::install({SIGTERM, SIGINT});
  if (!sig) {
    log::error("engine worker: {}", sig.message());
    return 1;
  }
  worker::WorkerOptions wo;
  wo.parent_pid = static_cast<pid_t>(parent_pid);
  wo.ignore_eof = ignore_eof;
  return worker::run_worker(wo, sig->get());
}

}  // namespace ember::cli
