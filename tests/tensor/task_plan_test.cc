#include "tensor/task_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace ember::tensor {
namespace {

struct Plan {
  std::vector<PlannedTask> tasks;
  std::vector<int64_t> starts;
};

Plan plan(const std::vector<UnitRun>& runs, int threads, int64_t min_share, int64_t min_task) {
  Plan p;
  plan_decode_tasks(runs, threads, min_share, min_task, &p.tasks, &p.starts);
  return p;
}

int64_t bytes(const std::vector<UnitRun>& runs, const PlannedTask& t) {
  return (t.u1 - t.u0) * runs[static_cast<size_t>(t.run)].unit_bytes;
}

// Every unit of every run in exactly one task, in stream order, none crossing a run, each cut
// at a multiple of its run's align or at the run's end.
void expect_covers_in_order(const std::vector<UnitRun>& runs, const Plan& p) {
  size_t run = 0;
  int64_t next = 0;
  for (const PlannedTask& t : p.tasks) {
    while (run < runs.size() && next == runs[run].units) {
      ++run;
      next = 0;
    }
    ASSERT_LT(run, runs.size());
    ASSERT_EQ(t.run, static_cast<int32_t>(run));
    ASSERT_EQ(t.u0, next);
    ASSERT_GT(t.u1, t.u0);
    ASSERT_LE(t.u1, runs[run].units);
    if (t.u1 != runs[run].units) {
      ASSERT_EQ(t.u1 % runs[run].align, 0);
    }
    next = t.u1;
  }
  while (run < runs.size() && next == runs[run].units) {
    ++run;
    next = 0;
  }
  EXPECT_EQ(run, runs.size()) << "units left over";
}

// Bytes of each share (thread) in the plan.
std::vector<int64_t> share_bytes(const std::vector<UnitRun>& runs, const Plan& p) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < p.starts.size(); ++s) {
    const int64_t end =
        s + 1 < p.starts.size() ? p.starts[s + 1] : static_cast<int64_t>(p.tasks.size());
    int64_t b = 0;
    for (int64_t i = p.starts[s]; i < end; ++i) b += bytes(runs, p.tasks[static_cast<size_t>(i)]);
    out.push_back(b);
  }
  return out;
}

// SmolLM2's layer at batch 1 (Q4_1 interleaved in groups of 8 rows of 360 bytes): the shares
// are equal in bytes to within a unit, whatever the task sizes. Split by task count (the old
// scheme: tasks of at least 22 groups, 4 a thread), one thread had 44 of the output
// projection's 72 groups and the other 28, and of q, k and v together 207 KB against 138 KB.
TEST(DecodeTaskPlan, shares_are_equal_in_bytes_to_within_a_unit) {
  constexpr int64_t kGroup = 8 * 360;
  const std::vector<std::vector<UnitRun>> jobs = {
      {{72, kGroup, 1}},                                    // o
      {{72, kGroup, 1}, {24, kGroup, 1}, {24, kGroup, 1}},  // q, k, v
      {{192, 2 * kGroup, 2}},                               // gate and up together
      {{72, 8 * 960, 1}},                                   // down
  };
  for (const auto& runs : jobs) {
    const Plan p = plan(runs, 2, 64 << 10, 16 << 10);
    expect_covers_in_order(runs, p);
    ASSERT_EQ(p.starts.size(), 2u);
    EXPECT_EQ(p.starts[0], 0);
    const auto sb = share_bytes(runs, p);
    int64_t unit = 0;
    for (const UnitRun& r : runs) unit = std::max(unit, r.unit_bytes * r.align);
    EXPECT_LE(std::abs(sb[0] - sb[1]), unit) << sb[0] << " vs " << sb[1];
  }
}

// Within a share the tasks halve: the first is about half the share, and the last, the one a
// thread can be left waiting on, about an eighth (at most three halvings).
TEST(DecodeTaskPlan, each_share_halves_down_to_its_last_task) {
  const std::vector<UnitRun> runs = {{1024, 1000, 1}};
  const Plan p = plan(runs, 2, 64'000, 16'000);
  expect_covers_in_order(runs, p);
  ASSERT_EQ(p.starts, (std::vector<int64_t>{0, 4}));
  ASSERT_EQ(p.tasks.size(), 8u);
  for (int s = 0; s < 2; ++s) {
    const auto* t = &p.tasks[static_cast<size_t>(4 * s)];
    EXPECT_EQ(t[0].u1 - t[0].u0, 256);
    EXPECT_EQ(t[1].u1 - t[1].u0, 128);
    EXPECT_EQ(t[2].u1 - t[2].u0, 64);
    EXPECT_EQ(t[3].u1 - t[3].u0, 64);
  }
}

// A halving stops where a task would fall under min_task_bytes; a share under twice that is one
// task; a stream under twice min_share_bytes is one share (run on the caller).
TEST(DecodeTaskPlan, small_shares_are_cut_less_and_small_streams_not_shared) {
  const std::vector<UnitRun> runs = {{100, 1000, 1}};  // 100 KB
  Plan p = plan(runs, 2, 40'000, 16'000);              // shares of 50 KB: 25, 12.5, 12.5 no
  expect_covers_in_order(runs, p);
  ASSERT_EQ(p.starts, (std::vector<int64_t>{0, 2}));
  ASSERT_EQ(p.tasks.size(), 4u);
  EXPECT_EQ(p.tasks[0].u1 - p.tasks[0].u0, 25);
  EXPECT_EQ(p.tasks[1].u1 - p.tasks[1].u0, 25);

  p = plan(runs, 2, 40'000, 30'000);  // halves of 25 KB < 30 KB: one task a share
  expect_covers_in_order(runs, p);
  EXPECT_EQ(p.starts, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(p.tasks.size(), 2u);

  p = plan(runs, 8, 40'000, 30'000);  // 100 KB holds two shares of 40 KB, not eight
  expect_covers_in_order(runs, p);
  EXPECT_EQ(p.starts.size(), 2u);

  p = plan(runs, 2, 64'000, 16'000);  // under 2 x 64 KB: one share
  expect_covers_in_order(runs, p);
  EXPECT_EQ(p.starts, (std::vector<int64_t>{0}));
}

// Cuts fall only at multiples of a run's align (rows that a rows function receives whole), or at
// its end; empty runs and uneven unit sizes are covered as well.
TEST(DecodeTaskPlan, cuts_respect_alignment_and_runs_of_any_size) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t align : {1, 2, 4}) {
      const std::vector<UnitRun> runs = {
          {37, 3000, align}, {0, 100, 1}, {5, 17'000, 1}, {201, 512, align}};
      const Plan p = plan(runs, threads, 20'000, 4'000);
      expect_covers_in_order(runs, p);
      ASSERT_FALSE(p.starts.empty());
      EXPECT_EQ(p.starts[0], 0);
      EXPECT_TRUE(std::is_sorted(p.starts.begin(), p.starts.end()));
      EXPECT_LE(p.starts.size(), static_cast<size_t>(threads));
    }
  }
  const Plan empty = plan({{0, 10, 1}}, 2, 1, 1);
  EXPECT_TRUE(empty.tasks.empty());
  EXPECT_EQ(empty.starts, (std::vector<int64_t>{0})) << "a valid (empty) block for the pool";
  const Plan none = plan({}, 2, 1, 1);
  EXPECT_TRUE(none.tasks.empty());
  EXPECT_EQ(none.starts, (std::vector<int64_t>{0}));
}

}  // namespace
}  // namespace ember::tensor
