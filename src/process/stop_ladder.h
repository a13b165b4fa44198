// The stop ladder: close the child's stdin (it drains and exits), wait
// `eof_wait`; SIGTERM its group, wait `term_wait`; SIGKILL its group, wait `kill_wait`. After
// every rung the child's real state is checked with waitpid (through StoppableChild::try_reap)
// rather than trusted from the wait returning: a wait can end early (EINTR, a spurious wakeup)
// with the child still running, and the ladder then keeps waiting until the rung's deadline.
// Each rung taken is logged; the outcome names the rung that ended the child.
// See docs/architecture.md, "Stop ladder".
//
// Time comes from an injectable clock, so unit tests drive the ladder on simulated time; the
// real Child implements StoppableChild and is tested with real processes.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

#include "process/child.h"

namespace ember::process {

class StoppableChild {
 public:
  virtual ~StoppableChild() = default;
  virtual void close_input() = 0;
  virtual void send_signal(int sig) = 0;
  virtual std::optional<ExitStatus> try_reap() = 0;
  virtual void wait_for(std::chrono::milliseconds timeout) = 0;  // may return early
};

// Adapts a Child (real process, signals go to its group).
class ChildStopper final : public StoppableChild {
 public:
  explicit ChildStopper(Child& c) : c_(c) {}
  void close_input() override { c_.close_stdin(); }
  void send_signal(int sig) override { c_.signal_group(sig); }
  std::optional<ExitStatus> try_reap() override { return c_.try_reap(); }
  void wait_for(std::chrono::milliseconds t) override { c_.wait_for(t); }

 private:
  Child& c_;
};

struct LadderWindows {
  std::chrono::milliseconds eof_wait{30'000};  // --engine-drain
  std::chrono::milliseconds term_wait{5'000};
  std::chrono::milliseconds kill_wait{5'000};
};

enum class Rung { AlreadyExited, Eof, Term, Kill, Unreaped };
std::string_view rung_name(Rung r);  // "already-exited", "eof", "sigterm", "sigkill", ...

struct LadderOutcome {
  Rung rung = Rung::Unreaped;  // the rung during whose wait the child was seen gone
  std::optional<ExitStatus> status;
  std::chrono::milliseconds elapsed{0};
};

using NowFn = std::function<std::chrono::steady_clock::time_point()>;

// `what` names the child in the log lines ("engine worker 1234").
LadderOutcome run_stop_ladder(StoppableChild& child, const LadderWindows& windows,
                              std::string_view what, NowFn now = std::chrono::steady_clock::now);

}  // namespace ember::process
