// Pid files (`ember serve --pid-file`, read by `ember stop` and `ember restart`). Written
// atomically (temp file, fsync, rename) at start and removed at exit, only if it still names this
// process. The first line is the pid alone (systemd's PIDFile= and `kill $(head -1 F)` read it);
// "key value" lines follow:
//
//   start_time TICKS   the writer's start time, field 22 of /proc/PID/stat (clock ticks since boot)
//   boot_id UUID       /proc/sys/kernel/random/boot_id when it was written
//   port N             the TCP port the server bound (added once bound: `--port 0` picks one)
//
// The pid, start time and boot id together name one process for the life of the machine, so a
// pid that was reused since — by any program, another ember server or an engine worker — is
// recognised as stale and never signalled. A file without start_time (written by an older ember)
// is checked by the process's name only, as before. Unknown keys are ignored.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/result.h"

namespace ember::process {

enum class PidState {
  Missing,    // no such file
  Invalid,    // the file does not hold a pid
  Running,    // the ember process that wrote the file is alive
  Dead,       // stale: no process with that pid
  NotEmber,   // stale: the pid was reused by another program (a file without start_time)
  NotWriter,  // stale: a live process has the pid, but its start time (or boot) differs
};

// A pid file larger than this is not one (it is read whole).
inline constexpr size_t kMaxPidFileBytes = 4096;

struct PidFileInfo {
  PidState state = PidState::Missing;
  pid_t pid = 0;
  uint16_t port = 0;            // 0: the file records no port (not bound yet, or an older ember)
  bool identity_known = false;  // the file records the writer's start time
  std::string detail;           // a sentence for the user, e.g. "pid 123 is not running"
};

PidFileInfo inspect_pid_file(const std::string& path);

// Whether `pid` is an ember executable (its exe or argv[0] is named ember).
bool process_is_ember(pid_t pid);

// Field 22 of /proc/PID/stat: when the process started, in clock ticks since boot.
std::optional<uint64_t> process_start_time(pid_t pid);

// A process held by a pidfd, opened only once it still matches its pid file: signals and waits
// reach that process, never a later one that reuses its pid. Move-only.
class PinnedProcess {
 public:
  // Re-reads `path` and pins the process it names if it is Running (the identity checked after
  // the pidfd is open, so the pidfd cannot refer to an older holder of the pid).
  static Result<PinnedProcess> pin(const std::string& path);
  PinnedProcess(PinnedProcess&& o) noexcept : fd_(o.fd_), info_(std::move(o.info_)) { o.fd_ = -1; }
  PinnedProcess& operator=(PinnedProcess&&) = delete;
  ~PinnedProcess();
  const PidFileInfo& info() const { return info_; }
  pid_t pid() const { return info_.pid; }
  Status signal(int signo) const;  // fails once the process is gone
  // Waits up to `timeout` for the process (not our child) to exit.
  bool wait_gone(std::chrono::milliseconds timeout) const;

 private:
  PinnedProcess() = default;
  int fd_ = -1;
  PidFileInfo info_;
};

class PidFile {
 public:
  // Fails when a live ember already owns the file, unless it is `predecessor` (`ember restart`:
  // the successor takes the file over while the old server drains); replaces a stale one
  // (with a warning).
  static Result<PidFile> create(const std::string& path, pid_t predecessor = 0);
  PidFile() = default;
  PidFile(PidFile&& o) noexcept;
  PidFile& operator=(PidFile&& o) noexcept;
  ~PidFile();
  const std::string& path() const { return path_; }
  // Rewrites the file with the port the server bound, for `ember restart`.
  Status set_port(uint16_t port);

 private:
  Status write() const;
  std::string path_;  // empty: nothing to remove
  uint64_t start_time_ = 0;
  std::string boot_id_;
  uint16_t port_ = 0;
};

}  // namespace ember::process
