// `ember restart`: replaces a running `ember serve --reuse-port` in place, without refusing a
// connection and without losing its warm cache (docs/operations.md, "In-place restart").
//
//   1. Finds the server through its pid file (pinned by a pidfd once its start time matched the
//      file: process/pid_file.h) and reads how it was started (/proc/PID/cmdline, environ and
//      cwd), so the successor runs with the same flags and environment — but from this binary,
//      which makes `ember restart` also the upgrade path — and on the port the old server
//      actually bound, which the pid file records (with `--port 0` the flags alone would send
//      the successor to another ephemeral port).
//   2. SIGUSR1: the old server writes its warm-state file now and reports it in P.warm. The
//      successor loads that file at start: the old server saves before the new one loads, so
//      what the cache held a moment ago is what the successor starts with (saving at the old
//      server's exit instead would come after the successor had loaded).
//   3. Starts the successor in its own session (a Ctrl-C here does not reach it), with a
//      private NOTIFY_SOCKET, and waits for READY=1 — sent once its listener has joined the
//      port. If it exits first, the old server was never touched.
//   4. SIGTERM to the old server: it steers new connections to the successor, takes what was
//      already queued to it, drains, exits; its stop report says how it went.
#include <CLI/CLI.hpp>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/file.h"
#include "cli/commands.h"
#include "cli/stop_report.h"
#include "process/pid_file.h"

namespace ember::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

Ms ms(double seconds) {
  return Ms(static_cast<int64_t>(seconds * 1000));
}

// A NUL-separated /proc file (cmdline, environ) as strings.
Result<std::vector<std::string>> read_nul_list(const std::string& path) {
  EMBER_TRY(std::string text, read_file(path));
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\0', start);
    if (end == std::string::npos) end = text.size();
    out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool has_reuse_port(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  for (const auto& a : args) {
    if (a == "--reuse-port" || a == "--reuse-port=true" || a == "--reuse-port=1") return true;
  }
  for (const auto& e : env) {
    if (e == "EMBER_REUSE_PORT=1" || e == "EMBER_REUSE_PORT=true") return true;
  }
  return false;
}

// The last --port value in `args`, else EMBER_PORT from `env`; empty: neither (the default).
std::string port_setting(const std::vector<std::string>& args,
                         const std::vector<std::string>& env) {
  std::string port;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--port" && i + 1 < args.size()) port = args[++i];
    if (args[i].rfind("--port=", 0) == 0) port = args[i].substr(7);
  }
  if (!port.empty()) return port;
  for (const auto& e : env) {
    if (e.rfind("EMBER_PORT=", 0) == 0) port = e.substr(11);
  }
  return port;
}

// `args` with every --port replaced by one `--port PORT` (which also overrides EMBER_PORT).
std::vector<std::string> with_port(const std::vector<std::string>& args, uint16_t port) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--port") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--port=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  out.push_back("--port");
  out.push_back(std::to_string(port));
  return out;
}

// The datagram socket the successor's READY=1 arrives on (an abstract name: nothing to clean).
struct NotifySocket {
  int fd = -1;
  std::string name;  // "@..." as NOTIFY_SOCKET spells it
  ~NotifySocket() {
    if (fd >= 0) ::close(fd);
  }
};

Result<void> open_notify_socket(NotifySocket& ns) {
  ns.fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (ns.fd < 0) return fail("socket(AF_UNIX): {}", std::strerror(errno));
  ns.name =
      fmt::format("@ember-restart-{}-{}", ::getpid(), Clock::now().time_since_epoch().count());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, ns.name.data() + 1, ns.name.size() - 1);
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + ns.name.size());
  if (::bind(ns.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    return fail("bind {}: {}", ns.name, std::strerror(errno));
  }
  return {};
}

// fork + exec of `exe args...` in its own session, in `cwd`, with `env`; stdout and stderr to
// `log` (appended) when given.
Result<pid_t> spawn_successor(const std::string& exe, const std::vector<std::string>& args,
                              const std::vector<std::string>& env, const std::string& cwd,
                              const std::string& log) {
  int log_fd = -1;
  if (!log.empty()) {
    log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) return fail("--log {}: {}", log, std::strerror(errno));
  }
  std::vector<char*> argv, envp;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return fail("fork: {}", std::strerror(errno));
  if (pid == 0) {  // only async-signal-safe calls from here
    ::setsid();
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  return pid;
}

// Waits for READY=1 on `ns` from `child`; fails if the child exits first or time runs out.
Status wait_ready(const NotifySocket& ns, pid_t child, Ms timeout) {
  const auto deadline = Clock::now() + timeout;
  char buf[4096];
  while (Clock::now() < deadline) {
    pollfd p{ns.fd, POLLIN, 0};
    ::poll(&p, 1, 100);
    for (;;) {
      ssize_t n = ::recv(ns.fd, buf, sizeof buf - 1, 0);
      if (n <= 0) break;
      std::string_view msg(buf, static_cast<size_t>(n));
      if (msg.find("READY=1") != std::string_view::npos) return {};
    }
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) {
      return fail("the new server (pid {}) exited ({} {}) before it was ready", child,
                  WIFEXITED(status) ? "status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    }
  }
  return fail("the new server (pid {}) was not ready after {} s", child, timeout.count() / 1000);
}

}  // namespace

int cmd_restart(int argc, char** argv) {
  CLI::App app{
      "Replace a running `ember serve --reuse-port` in place: no refused connection, warm cache "
      "handed over",
      "ember restart"};
  std::string pid_file, log;
  double ready_timeout_s = 600, save_timeout_s = 120, timeout_s = 120;
  app.add_option("--pid-file", pid_file, "the pid file `ember serve --pid-file` wrote")
      ->envname("EMBER_PID_FILE")
      ->required();
  app.add_option("--log", log, "append the new server's stdout and stderr to this file");
  app.add_option("--ready-timeout", ready_timeout_s,
                 "seconds the new server may take to load its model")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--save-timeout", save_timeout_s,
                 "seconds the old server may take to write its warm state")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--timeout", timeout_s, "seconds to wait for the old server's drain")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  auto report_error = [](const std::string& m) {
    std::fprintf(stderr, "ember restart: %s\n", m.c_str());
    return 1;
  };
  auto pinned = process::PinnedProcess::pin(pid_file);
  if (!pinned) return report_error(pinned.message());
  const pid_t old_pid = pinned->pid();
  const std::string proc = fmt::format("/proc/{}", old_pid);
  auto cmdline = read_nul_list(proc + "/cmdline");
  auto environ_list = read_nul_list(proc + "/environ");
  std::error_code ec;
  const auto cwd = std::filesystem::read_symlink(proc + "/cwd", ec);
  if (!cmdline || !environ_list || ec) {
    return report_error(
        fmt::format("cannot read how pid {} was started ({}): run ember restart "
                    "as the user that runs the server",
                    old_pid, !cmdline ? cmdline.message() : ec.message()));
  }
  std::vector<std::string> args(cmdline->begin() + (cmdline->empty() ? 0 : 1), cmdline->end());
  if (args.empty() || args[0] != "serve") {
    return report_error(fmt::format("pid {} is not an `ember serve`", old_pid));
  }
  if (!has_reuse_port(args, *environ_list)) {
    return report_error(fmt::format(
        "the server (pid {}) was not started with --reuse-port, so a successor could not bind "
        "its port while it drains; start it once with --reuse-port (or use ember stop, then "
        "start it again)",
        old_pid));
  }
  if (const uint16_t bound = pinned->info().port; bound != 0) {
    args = with_port(args, bound);
  } else if (port_setting(args, *environ_list) == "0") {
    return report_error(fmt::format(
        "{} records no bound port (the server, pid {}, has not bound yet or is from an older "
        "ember) and it was started with --port 0: the successor could not find its port",
        pid_file, old_pid));
  }

  // 2. The warm state, saved now for the successor to load.
  const std::string warm_path = warm_report_path(pid_file);
  std::filesystem::remove(warm_path, ec);
  if (auto st = pinned->signal(SIGUSR1); !st) return report_error(st.message());
  std::optional<engine::WarmReport> warm;
  for (auto deadline = Clock::now() + ms(save_timeout_s); Clock::now() < deadline;) {
    if (auto r = read_warm_report(warm_path)) {  // absent until the old server wrote it
      warm = *r;
      break;
    }
    std::this_thread::sleep_for(Ms(20));  // polling a file another process writes
  }
  if (!warm) {
    std::fprintf(stderr,
                 "ember restart: the old server wrote no warm state in %g s; going on "
                 "without it\n",
                 save_timeout_s);
  } else if (!warm->ok) {
    std::fprintf(stderr, "ember restart: warm state not handed over: %s\n", warm->message.c_str());
  } else {
    std::fprintf(stderr, "ember restart: warm state saved by pid %d: %lld blocks (%lld bytes)\n",
                 old_pid, static_cast<long long>(warm->blocks),
                 static_cast<long long>(warm->bytes));
  }

  // 3. The successor, ready.
  NotifySocket ns;
  if (auto st = open_notify_socket(ns); !st) return report_error(st.message());
  std::vector<std::string> env;
  for (const auto& e : *environ_list) {
    if (e.rfind("NOTIFY_SOCKET=", 0) == 0 || e.rfind("EMBER_SUCCESSOR_OF=", 0) == 0) continue;
    env.push_back(e);
  }
  env.push_back("NOTIFY_SOCKET=" + ns.name);
  env.push_back(fmt::format("EMBER_SUCCESSOR_OF={}", old_pid));
  std::error_code exe_ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", exe_ec);
  if (exe_ec) return report_error(fmt::format("/proc/self/exe: {}", exe_ec.message()));
  auto child = spawn_successor(exe.string(), args, env, cwd.string(), log);
  if (!child) return report_error(child.message());
  std::fprintf(stderr,
               "ember restart: started the new server (pid %d); waiting for it to be "
               "ready\n",
               *child);
  if (auto st = wait_ready(ns, *child, ms(ready_timeout_s)); !st) {
    ::kill(*child, SIGTERM);
    return report_error(st.message() +
                        fmt::format("; the old server (pid {}) still serves", old_pid));
  }

  // 4. The old server drains and hands the port over.
  if (auto st = pinned->signal(SIGTERM); !st) return report_error(st.message());
  if (!pinned->wait_gone(ms(timeout_s))) {
    return report_error(fmt::format(
        "the new server (pid {}) serves, but the old one (pid {}) is still draining after {} s "
        "(ember stop --force stops it)",
        *child, old_pid, timeout_s));
  }
  auto stopped = read_stop_report(stop_report_path(pid_file));
  std::printf(
      "ember restart: pid %d replaced by pid %d; warm state: %s; old server: %s\n", old_pid, *child,
      warm && warm->ok ? fmt::format("{} blocks handed over", warm->blocks).c_str() : "none",
      stopped ? fmt::format("exit {}, {} request(s) drained, {} cancelled", stopped->exit_code,
                            stopped->in_flight - stopped->cancelled, stopped->cancelled)
                    .c_str()
              : "exited (no stop report)");
  return 0;
}

}  // namespace ember::cli
