// Child processes in their own process group. spawn() starts the
// program with posix_spawn and POSIX_SPAWN_SETPGROUP, so a terminal's Ctrl-C (sent to the
// foreground group) never reaches it; stdin and stdout are pipes the caller owns, stderr is
// inherited (the child's logs pass through). Signal dispositions and the mask are reset to the
// defaults in the child, and every descriptor above stderr is closed in it.
// See docs/architecture.md, "Processes and shutdown".
//
// Invariants: the child is reaped exactly once, under the Child's lock (try_reap/wait_for are
// safe from any thread); once reaped, its pid is never signalled again (the pid may be reused);
// destroying a Child that still runs kills its whole group and reaps it, so no child outlives
// the object that started it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"

namespace ember::process {

// A waitpid status, decoded.
struct ExitStatus {
  int raw = 0;
  bool exited() const;
  int code() const;  // exit code when exited(); -1 otherwise
  bool signaled() const;
  int signal() const;            // terminating signal when signaled(); 0 otherwise
  std::string describe() const;  // "exit 0", "killed by signal 9 (SIGKILL)"
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: the executable's path
  bool new_process_group = true;
};

class Child {
 public:
  static Result<std::unique_ptr<Child>> spawn(const SpawnOptions& opts);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return out_fd_; }  // read by one reader; closed by the destructor

  // Writes all of `bytes` to the child's stdin; an error once stdin is closed or the child
  // has gone (EPIPE: the caller must ignore SIGPIPE). Serialized with close_stdin().
  Status write_stdin(std::span<const uint8_t> bytes);
  void close_stdin();  // idempotent: the child sees EOF

  // Sends `sig` to the child's process group (or the child alone without one). False when the
  // child was already reaped.
  bool signal_group(int sig);

  // The exit status once the child has exited and been reaped (waitpid, WNOHANG).
  std::optional<ExitStatus> try_reap();
  // Waits until the child exits or `timeout` passes (a pidfd poll; EINTR returns early), then
  // reports the real state with try_reap(). A nullopt does not mean the full timeout passed.
  std::optional<ExitStatus> wait_for(std::chrono::milliseconds timeout);

 private:
  Child() = default;

  pid_t pid_ = -1;
  bool own_group_ = true;
  int pidfd_ = -1;
  int out_fd_ = -1;
  std::mutex in_mu_;  // guards in_fd_
  int in_fd_ = -1;
  std::mutex reap_mu_;  // guards status_
  std::optional<ExitStatus> status_;
};

// In a child: have the kernel SIGKILL this process when the thread that started it exits
// (PR_SET_PDEATHSIG), then check that the parent is still `expected` — it may have died before
// the request, and then the signal never comes. An error means: the parent is gone, exit now.
// The parent must start the child from a thread that lives as long as the child should.
Status exit_with_parent(pid_t expected);

}  // namespace ember::process
