#include "process/stop_ladder.h"

#include <signal.h>

#include "base/log.h"

namespace ember::process {

std::string_view rung_name(Rung r) {
  switch (r) {
    case Rung::AlreadyExited:
      return "already-exited";
    case Rung::Eof:
      return "eof";
    case Rung::Term:
      return "sigterm";
    case Rung::Kill:
      return "sigkill";
    case Rung::Unreaped:
      return "unreaped";
  }
  return "?";
}

namespace {

using Ms = std::chrono::milliseconds;

// Waits until the child is reaped or `window` has passed on the clock, re-checking waitpid
// after every wait. The time left is compared at the clock's own resolution and waited in
// whole milliseconds rounded up: truncating it let a rung end up to 1 ms short of its window.
std::optional<ExitStatus> wait_rung(StoppableChild& c, Ms window, const NowFn& now) {
  const auto deadline = now() + window;
  for (;;) {
    if (auto st = c.try_reap()) return st;
    const auto left = deadline - now();
    if (left <= left.zero()) return std::nullopt;
    c.wait_for(std::chrono::ceil<Ms>(left));
  }
}

}  // namespace

LadderOutcome run_stop_ladder(StoppableChild& child, const LadderWindows& w, std::string_view what,
                              NowFn now) {
  const auto t0 = now();
  LadderOutcome out;
  auto finish = [&](Rung r, std::optional<ExitStatus> st) {
    out.rung = r;
    out.status = st;
    out.elapsed = std::chrono::duration_cast<Ms>(now() - t0);
    if (st) {
      log::info("{}: stopped at rung {} ({}) after {} ms", what, rung_name(r), st->describe(),
                out.elapsed.count());
    } else {
      log::error("{}: still not reaped after SIGKILL and {} ms", what, out.elapsed.count());
    }
    return out;
  };
  if (auto st = child.try_reap()) return finish(Rung::AlreadyExited, st);

  log::info("{}: stop rung eof: closing its stdin, waiting up to {} ms", what, w.eof_wait.count());
  child.close_input();
  if (auto st = wait_rung(child, w.eof_wait, now)) return finish(Rung::Eof, st);

  log::warn("{}: stop rung sigterm: still running after {} ms; waiting up to {} ms", what,
            w.eof_wait.count(), w.term_wait.count());
  child.send_signal(SIGTERM);
  if (auto st = wait_rung(child, w.term_wait, now)) return finish(Rung::Term, st);

  log::warn("{}: stop rung sigkill: still running after SIGTERM and {} ms", what,
            w.term_wait.count());
  child.send_signal(SIGKILL);
  if (auto st = wait_rung(child, w.kill_wait, now)) return finish(Rung::Kill, st);
  return finish(Rung::Unreaped, std::nullopt);
}

}  // namespace ember::process
