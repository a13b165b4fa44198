#include "server/drain.h"

#include <gtest/gtest.h>

#include "server/progress.h"

namespace ember::server {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(DrainController, serves_until_the_first_signal) {
  DrainController d(30s, 5s);
  Clock::time_point t0{};
  EXPECT_FALSE(d.draining());
  auto step = d.poll(t0 + 1000s, 3);
  EXPECT_FALSE(step.cut_off);
  EXPECT_FALSE(step.done);
}

TEST(DrainController, drain_completes_as_soon_as_in_flight_work_finishes) {
  DrainController d(30s, 5s);
  Clock::time_point t0{};
  EXPECT_EQ(d.on_signal(t0), DrainController::SignalAction::BeginDrain);
  EXPECT_TRUE(d.draining());
  EXPECT_EQ(d.deadline(), t0 + 30s);
  EXPECT_FALSE(d.poll(t0 + 1s, 3).done);
  EXPECT_FALSE(d.poll(t0 + 10s, 1).done);
  auto step = d.poll(t0 + 11s, 0);
  EXPECT_TRUE(step.done);
  EXPECT_FALSE(step.cut_off);
}

TEST(DrainController, deadline_cuts_off_once_then_waits_for_honest_endings) {
  DrainController d(30s, 5s);
  Clock::time_point t0{};
  (void)d.on_signal(t0);
  EXPECT_FALSE(d.poll(t0 + 29s, 2).cut_off);
  auto step = d.poll(t0 + 30s, 2);
  EXPECT_TRUE(step.cut_off);
  EXPECT_FALSE(step.done);
  EXPECT_EQ(d.phase(), DrainController::Phase::CuttingOff);
  step = d.poll(t0 + 31s, 1);
  EXPECT_FALSE(step.cut_off);  // reported once
  EXPECT_FALSE(step.done);
  EXPECT_TRUE(d.poll(t0 + 31s, 0).done);
}

TEST(DrainController, cutoff_grace_bounds_requests_that_never_end) {
  DrainController d(10s, 5s);
  Clock::time_point t0{};
  (void)d.on_signal(t0);
  EXPECT_TRUE(d.poll(t0 + 10s, 1).cut_off);
  EXPECT_FALSE(d.poll(t0 + 14s, 1).done);
  EXPECT_TRUE(d.poll(t0 + 15s, 1).done);
}

TEST(DrainController, second_signal_asks_for_an_immediate_exit) {
  DrainController d(30s, 5s);
  Clock::time_point t0{};
  EXPECT_EQ(d.on_signal(t0), DrainController::SignalAction::BeginDrain);
  EXPECT_EQ(d.on_signal(t0 + 1s), DrainController::SignalAction::ExitNow);
  EXPECT_EQ(d.deadline(), t0 + 30s);  // the deadline is not moved by later signals
}

TEST(DrainController, zero_timeout_cuts_off_at_once) {
  DrainController d(0s, 1s);
  Clock::time_point t0{};
  (void)d.on_signal(t0);
  EXPECT_TRUE(d.poll(t0, 1).cut_off);
}

TEST(ProgressMonitor, work_pending_with_a_still_step_counter_becomes_unhealthy) {
  ProgressMonitor p(10s);
  Clock::time_point t0{};
  EXPECT_TRUE(p.observe(t0, 5, 2));
  EXPECT_TRUE(p.observe(t0 + 10s, 5, 2));
  EXPECT_FALSE(p.observe(t0 + 11s, 5, 2));
  EXPECT_TRUE(p.observe(t0 + 12s, 6, 2));  // a step: healthy again
}

TEST(ProgressMonitor, idle_engine_is_healthy_however_long_it_waits) {
  ProgressMonitor p(10s);
  Clock::time_point t0{};
  EXPECT_TRUE(p.observe(t0, 5, 0));
  EXPECT_TRUE(p.observe(t0 + 1000s, 5, 0));
  // Work arrives: the stall clock starts now, not at the last step.
  EXPECT_TRUE(p.observe(t0 + 1001s, 5, 1));
  EXPECT_TRUE(p.observe(t0 + 1005s, 5, 1));
}

}  // namespace
}  // namespace ember::server
