#include "server/progress.h"

namespace ember::server {

bool ProgressMonitor::observe(Clock::time_point now, uint64_t steps, int64_t pending_work) {
  if (!seen_ || steps != last_steps_ || pending_work <= 0) {
    // Progress, or nothing to do: restart the stall clock.
    seen_ = true;
    last_steps_ = steps;
    last_progress_ = now;
    healthy_ = true;
    return healthy_;
  }
  healthy_ = now - last_progress_ <= stall_limit_;
  return healthy_;
}

}  // namespace ember::server
