#include "tensor/task_plan.h"

#include <algorithm>

#include "base/result.h"

namespace ember::tensor {
namespace {

// Halvings of a share: up to a half, a quarter, an eighth and an eighth (four tasks a thread, as
// many as the equal tasks before; the last is half their size).
constexpr int kMaxHalvings = 3;

}  // namespace

void plan_decode_tasks(std::span<const UnitRun> runs, int threads, int64_t min_share_bytes,
                       int64_t min_task_bytes, std::vector<PlannedTask>* tasks,
                       std::vector<int64_t>* share_starts) {
  tasks->clear();
  share_starts->clear();
  // Cuts are byte offsets into the stream, each at an allowed unit boundary of some run. Scratch
  // kept per thread: a decode step plans a few hundred of these.
  thread_local std::vector<int64_t> run_start, cuts, share_cut;
  run_start.assign(runs.size() + 1, 0);
  for (size_t i = 0; i < runs.size(); ++i) {
    EMBER_ASSERT(runs[i].units >= 0 && runs[i].unit_bytes > 0 && runs[i].align > 0);
    run_start[i + 1] = run_start[i] + runs[i].units * runs[i].unit_bytes;
  }
  const int64_t total = run_start.back();
  if (total == 0) {  // nothing to run (no runs, or only empty ones): one empty share
    share_starts->push_back(0);
    return;
  }
  // The allowed cut nearest to byte c: a multiple of the run's align, or the run's end.
  const auto snap = [&](int64_t c) {
    size_t i = 0;
    while (i + 1 < runs.size() && c >= run_start[i + 1]) ++i;
    const UnitRun& r = runs[i];
    const int64_t step = r.unit_bytes * r.align;
    int64_t u = (c - run_start[i] + step / 2) / step * r.align;
    u = std::min(u, r.units);
    return run_start[i] + u * r.unit_bytes;
  };
  const int shares = static_cast<int>(
      std::clamp<int64_t>(total / std::max<int64_t>(1, min_share_bytes), 1, std::max(1, threads)));
  cuts.assign(run_start.begin(), run_start.end());
  share_cut.assign(static_cast<size_t>(shares), 0);
  for (int b = 0; b < shares; ++b) {
    const int64_t s0 = total * b / shares, s1 = total * (b + 1) / shares;
    share_cut[static_cast<size_t>(b)] = snap(s0);
    cuts.push_back(share_cut[static_cast<size_t>(b)]);
    int64_t piece = s1 - s0, at = s0;
    for (int k = 0; k < kMaxHalvings && piece / 2 >= min_task_bytes; ++k) {
      piece /= 2;
      at += piece;
      cuts.push_back(snap(at));
    }
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  size_t run = 0, next_share = 0;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    while (run + 1 < runs.size() && cuts[c] >= run_start[run + 1]) ++run;
    while (next_share < share_cut.size() && share_cut[next_share] <= cuts[c]) {
      share_starts->push_back(static_cast<int64_t>(tasks->size()));
      ++next_share;
    }
    const UnitRun& r = runs[run];
    tasks->push_back({static_cast<int32_t>(run), (cuts[c] - run_start[run]) / r.unit_bytes,
                      (cuts[c + 1] - run_start[run]) / r.unit_bytes});
  }
  // A share snapped onto the stream's end (shares of less than a unit) starts past the last task.
  while (next_share < share_cut.size()) {
    share_starts->push_back(static_cast<int64_t>(tasks->size()));
    ++next_share;
  }
}

}  // namespace ember::tensor
