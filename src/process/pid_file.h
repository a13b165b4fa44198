// Pid files (`ember serve --pid-file`, read by `ember stop`). Written atomically (temp file,
// fsync, rename) at start and removed at exit, only if it still names this process. A file
// whose pid is dead, or names a process that is not ember (checked through /proc/PID/exe and
// /proc/PID/cmdline), is stale: it is reported, never trusted.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

#include "base/result.h"

namespace ember::process {

enum class PidState {
  Missing,   // no such file
  Invalid,   // the file does not hold a pid
  Running,   // an ember process with that pid is alive
  Dead,      // stale: no process with that pid
  NotEmber,  // stale: the pid was reused by another program
};

struct PidFileInfo {
  PidState state = PidState::Missing;
  pid_t pid = 0;
  std::string detail;  // a sentence for the user, e.g. "pid 123 is not running"
};

PidFileInfo inspect_pid_file(const std::string& path);

// Whether `pid` is an ember executable (its exe or argv[0] is named ember).
bool process_is_ember(pid_t pid);

// Waits up to `timeout` for a process that need not be our child to exit (a pidfd).
bool wait_gone(pid_t pid, std::chrono::milliseconds timeout);

class PidFile {
 public:
  // Fails when a live ember already owns the file, unless it is `predecessor` (`ember restart`:
  // the successor takes the file over while the old server drains); replaces a stale one
  // (with a warning).
  static Result<PidFile> create(const std::string& path, pid_t predecessor = 0);
  PidFile() = default;
  PidFile(PidFile&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  PidFile& operator=(PidFile&& o) noexcept;
  ~PidFile();
  const std::string& path() const { return path_; }

 private:
  std::string path_;  // empty: nothing to remove
};

}  // namespace ember::process
