// Liveness by progress: the engine is unhealthy when it has work (queued or
// active requests) while its step counter stands still for longer than `stall_limit`.
// Driven by the caller's clock so tests use simulated time.
// See docs/architecture.md, "Drain contract".
#pragma once

#include <chrono>
#include <cstdint>

namespace ember::server {

class ProgressMonitor {
 public:
  using Clock = std::chrono::steady_clock;
  explicit ProgressMonitor(Clock::duration stall_limit) : stall_limit_(stall_limit) {}

  // Record an observation; returns whether the engine is healthy now.
  bool observe(Clock::time_point now, uint64_t steps, int64_t pending_work);
  bool healthy() const { return healthy_; }

 private:
  Clock::duration stall_limit_;
  bool seen_ = false;
  bool healthy_ = true;
  uint64_t last_steps_ = 0;
  Clock::time_point last_progress_{};  // last step change, or when work appeared
};

}  // namespace ember::server
