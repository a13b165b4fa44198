// How a decode matmul's work is cut for the pool (tensor::matmul, up to 16 tokens): a pure
// function of the products' sizes, kept apart so the split can be tested without timing.
//
// The products' units (rows, row tiles, interleaved groups) form one stream, product after
// product. It is cut into shares of equal weight bytes, one per thread (the caller's first),
// each share one contiguous stretch of the stream, then each share into tasks of halving size:
// a half, a quarter, ..., the last two equal, none below min_task_bytes. A thread runs its own
// share front to back and then takes tasks from the back of the others' (ThreadPool::
// parallel_for_blocks), so the last task it can be left waiting on is a share's smallest.
//
// Equal shares by bytes, not by task count: with tasks of a fixed minimum size, a few tasks per
// thread split by count gave one thread 44 of an output projection's 72 row groups and the other
// 28 (SmolLM2 at batch 1: 576 x 576 Q4_1, tasks of at least 22 groups), and the other thread
// waited for the difference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ember::tensor {

// One product's part of the stream: `units` units of `unit_bytes` weight bytes each; tasks
// start and end at multiples of `align` units (or at the product's end).
struct UnitRun {
  int64_t units = 0;
  int64_t unit_bytes = 1;
  int64_t align = 1;
};

// Units [u0, u1) of run `run`.
struct PlannedTask {
  int32_t run = 0;
  int64_t u0 = 0, u1 = 0;
};

// Writes the tasks to *tasks and each share's first task index to *share_starts (one entry per
// share, the first 0, at least one; both cleared first). Shares: `threads`, or fewer so that each
// has at least min_share_bytes (a stream under 2 x min_share_bytes is one share: not worth a
// hand-off). A share is halved while its halves keep at least min_task_bytes, at most three times.
// Tasks never cross runs, every unit is in exactly one task, and tasks follow the stream's order.
void plan_decode_tasks(std::span<const UnitRun> runs, int threads, int64_t min_share_bytes,
                       int64_t min_task_bytes, std::vector<PlannedTask>* tasks,
                       std::vector<int64_t>* share_starts);

}  // namespace ember::tensor
