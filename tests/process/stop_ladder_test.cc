#include "process/stop_ladder.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <vector>

namespace ember::process {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A child on simulated time: waits return after half the time asked (a wait may end early),
// and the child exits when the signal it obeys arrives (or at EOF).
struct FakeChild : StoppableChild {
  enum class Obeys { Eof, Term, Kill, Nothing };
  explicit FakeChild(Obeys o) : obeys(o) {}
  Obeys obeys;
  Clock::time_point t{};
  std::optional<ExitStatus> exited;
  std::vector<std::string> calls;
  int reaps = 0;

  void close_input() override {
    calls.push_back("close");
    if (obeys == Obeys::Eof) exit_at = t + 100ms;
  }
  void send_signal(int sig) override {
    calls.push_back(sig == SIGTERM ? "term" : "kill");
    if (sig == SIGTERM && obeys == Obeys::Term) exit_at = t + 10ms, status = 15;
    if (sig == SIGKILL && obeys != Obeys::Nothing) exit_at = t, status = 9;
  }
  std::optional<ExitStatus> try_reap() override {
    reaps++;
    if (!exited && exit_at && t >= *exit_at) exited = ExitStatus{status};
    return exited;
  }
  // Like a pidfd poll: wakes when the child exits, else (early) after half the time asked.
  void wait_for(std::chrono::milliseconds d) override {
    if (shortfall > Clock::duration::zero()) {  // a timer that fires a fraction of a ms early
      t += std::chrono::duration_cast<Clock::duration>(d) - shortfall;
      return;
    }
    auto step = std::max(std::chrono::duration_cast<Clock::duration>(d / 2), Clock::duration(1ms));
    t = (exit_at && *exit_at > t && *exit_at < t + step) ? *exit_at : t + step;
  }
  NowFn clock() {
    return [this] { return t; };
  }
  std::optional<Clock::time_point> exit_at;
  int status = 0;
  Clock::duration shortfall{};
};

const LadderWindows kWindows{30s, 5s, 5s};

TEST(StopLadder, a_child_that_obeys_eof_ends_at_the_eof_rung) {
  FakeChild c(FakeChild::Obeys::Eof);
  auto out = run_stop_ladder(c, kWindows, "test", c.clock());
  EXPECT_EQ(out.rung, Rung::Eof);
  EXPECT_EQ(c.calls, std::vector<std::string>{"close"});
  ASSERT_TRUE(out.status);
  EXPECT_EQ(out.status->code(), 0);
  EXPECT_LE(out.elapsed, 200ms);
}

TEST(StopLadder, a_child_that_ignores_eof_gets_sigterm_after_the_full_drain_window) {
  FakeChild c(FakeChild::Obeys::Term);
  auto out = run_stop_ladder(c, kWindows, "test", c.clock());
  EXPECT_EQ(out.rung, Rung::Term);
  EXPECT_EQ(c.calls, (std::vector<std::string>{"close", "term"}));
  // Waits that returned early did not shorten the window: SIGTERM came at 30 s, not before.
  EXPECT_GE(out.elapsed, 30s);
  EXPECT_LT(out.elapsed, 31s);
}

// Seen in a local CI run: a real ladder ended its two windows after 3,999 ms of 4,000, because
// the time left was truncated to whole milliseconds (0.9 ms left counted as none).
TEST(StopLadder, a_wait_that_ends_a_fraction_of_a_millisecond_early_does_not_shorten_a_window) {
  FakeChild c(FakeChild::Obeys::Kill);
  c.shortfall = std::chrono::microseconds(300);
  auto out = run_stop_ladder(c, kWindows, "test", c.clock());
  EXPECT_EQ(out.rung, Rung::Kill);
  EXPECT_GE(out.elapsed, 35s);
}

TEST(StopLadder, a_child_that_ignores_sigterm_gets_sigkill) {
  FakeChild c(FakeChild::Obeys::Kill);
  auto out = run_stop_ladder(c, kWindows, "test", c.clock());
  EXPECT_EQ(out.rung, Rung::Kill);
  EXPECT_EQ(c.calls, (std::vector<std::string>{"close", "term", "kill"}));
  EXPECT_GE(out.elapsed, 35s);
}

TEST(StopLadder, a_child_already_gone_is_not_signalled) {
  FakeChild c(FakeChild::Obeys::Eof);
  c.exited = ExitStatus{0};
  auto out = run_stop_ladder(c, kWindows, "test", c.clock());
  EXPECT_EQ(out.rung, Rung::AlreadyExited);
  EXPECT_TRUE(c.calls.empty());
}

TEST(StopLadder, a_child_that_survives_sigkill_is_reported_unreaped) {
  FakeChild c(FakeChild::Obeys::Nothing);
  auto out = run_stop_ladder(c, kWindows, "test", c.clock());
  EXPECT_EQ(out.rung, Rung::Unreaped);
  EXPECT_FALSE(out.status);
}

// The same ladder on real processes, with short windows.
const LadderWindows kShort{2s, 2s, 5s};

std::unique_ptr<Child> sh(const std::string& script) {
  auto c = Child::spawn({{"/bin/sh", "-c", script}});
  EXPECT_TRUE(c.ok()) << c.message();
  return std::move(*c);
}

TEST(StopLadderReal, eof_stops_a_child_that_reads_its_stdin) {
  auto c = sh("cat >/dev/null; exit 0");
  ChildStopper s(*c);
  auto out = run_stop_ladder(s, kShort, "cat");
  EXPECT_EQ(out.rung, Rung::Eof);
  EXPECT_EQ(out.status->code(), 0);
  EXPECT_LT(out.elapsed, 2s);
}

TEST(StopLadderReal, sigterm_stops_a_child_that_ignores_eof) {
  auto c = sh("exec sleep 60");
  ChildStopper s(*c);
  auto out = run_stop_ladder(s, kShort, "sleep");
  EXPECT_EQ(out.rung, Rung::Term);
  EXPECT_EQ(out.status->signal(), SIGTERM);
  EXPECT_GE(out.elapsed, 2s);
  EXPECT_LT(out.elapsed, 4s);
}

TEST(StopLadderReal, sigkill_stops_a_child_that_ignores_sigterm) {
  auto c = sh("trap '' TERM; while :; do sleep 0.2; done");
  ChildStopper s(*c);
  auto out = run_stop_ladder(s, kShort, "stubborn");
  EXPECT_EQ(out.rung, Rung::Kill);
  EXPECT_EQ(out.status->signal(), SIGKILL);
  EXPECT_GE(out.elapsed, 4s);
}

}  // namespace
}  // namespace ember::process
