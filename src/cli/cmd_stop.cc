// `ember stop`: stops a running `ember serve` from another terminal. Finds it through its pid
// file (a stale file — a dead pid, or a pid now held by another process, ember or not: its start
// time differs from the one recorded — is reported and removed, and nothing is signalled),
// pins the process with a pidfd, sends it SIGTERM (the graceful drain), waits for it to go (the
// pidfd, since it is not our child), then reads the stop report the server wrote on its way out:
// requests drained and cancelled, how the engine stopped, the exit status. `--force` escalates when
// the wait runs out: a second SIGTERM (the server kills its engine and exits at once), then
// SIGKILL.
#include <CLI/CLI.hpp>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/stop_report.h"
#include "process/pid_file.h"

namespace ember::cli {
int cmd_stop(int argc, char** argv) {
  CLI::App app{"Stop a running `ember serve` gracefully, through its pid file", "ember stop"};
  std::string pid_file;
  double timeout_s = 120;
  bool force = false;
  app.add_option("--pid-file", pid_file, "the pid file `ember serve --pid-file` wrote")
      ->envname("EMBER_PID_FILE")
      ->required();
  app.add_option("--timeout", timeout_s,
                 "seconds to wait for the drain (the server's --drain-timeout plus its "
                 "--engine-drain, and some)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_flag("--force", force,
               "when the wait runs out: a second SIGTERM (exit at once), then SIGKILL");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto info = process::inspect_pid_file(pid_file);
  switch (info.state) {
    case process::PidState::Missing:
    case process::PidState::Invalid:
      std::fprintf(stderr, "ember stop: %s\n", info.detail.c_str());
      return 1;
    case process::PidState::Dead:
    case process::PidState::NotEmber:
    case process::PidState::NotWriter: {
      std::error_code ec;
      std::filesystem::remove(pid_file, ec);
      const bool live = info.state != process::PidState::Dead;
      std::fprintf(stderr, "ember stop: %s%s; removed the file (no server to stop)\n",
                   info.detail.c_str(), live ? ": refusing to signal it" : "");
      return 1;
    }
    case process::PidState::Running:
      break;
  }
  if (!info.identity_known) {
    std::fprintf(stderr,
                 "ember stop: %s records no start time (written by an older ember): process %d "
                 "is trusted by its name only\n",
                 pid_file.c_str(), info.pid);
  }
  auto pinned = process::PinnedProcess::pin(pid_file);
  if (!pinned) {
    std::fprintf(stderr, "ember stop: %s: refusing to signal it\n", pinned.message().c_str());
    return 1;
  }
  const pid_t pid = pinned->pid();
  if (auto st = pinned->signal(SIGTERM); !st) {
    std::fprintf(stderr, "ember stop: %s\n", st.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "ember stop: asked ember (pid %d) to drain and stop; waiting up to %g s\n",
               pid, timeout_s);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  bool gone = pinned->wait_gone(timeout);
  const char* escalated = nullptr;
  if (!gone && !force) {
    std::fprintf(stderr,
                 "ember stop: ember (pid %d) is still draining after %g s; run again with "
                 "--force to stop it at once\n",
                 pid, timeout_s);
    return 1;
  }
  if (!gone) {
    std::fprintf(stderr, "ember stop: --force: second SIGTERM (kill the engine, exit now)\n");
    (void)pinned->signal(SIGTERM);
    escalated = "second SIGTERM";
    gone = pinned->wait_gone(std::chrono::seconds(5));
    if (!gone) {
      std::fprintf(stderr, "ember stop: --force: SIGKILL\n");
      (void)pinned->signal(SIGKILL);
      escalated = "SIGKILL";
      gone = pinned->wait_gone(std::chrono::seconds(5));
    }
  }
  if (!gone) {
    std::fprintf(stderr, "ember stop: process %d did not exit\n", pid);
    return 1;
  }
  auto report = read_stop_report(stop_report_path(pid_file));
  if (!report) {
    std::fprintf(stderr, "ember stop: ember (pid %d) exited%s%s; it left no stop report\n", pid,
                 escalated ? " after " : "", escalated ? escalated : "");
    return escalated ? 1 : 0;
  }
  std::printf(
      "ember stop: ember (pid %d) stopped: exit %d; %d request(s) in flight at the drain: %d "
      "drained, %d cancelled; engine: %s\n",
      pid, report->exit_code, report->in_flight, report->in_flight - report->cancelled,
      report->cancelled, report->engine_stop.c_str());
  return report->exit_code == 0 ? 0 : 1;
}

}  // namespace ember::cli
