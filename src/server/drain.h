// The drain controller: pure lifecycle logic, driven by the caller's
// clock so tests run it on simulated time.
// See docs/architecture.md, "Drain contract".
//
//   Serving --signal--> Draining --(in-flight == 0)--------------------------> Done
//                          |--(deadline passed)--> CuttingOff --(in-flight == 0
//                                                                 or grace passed)--> Done
// A second signal in any state asks for an immediate exit.
// Invariants: the deadline is fixed when the drain starts; cut_off is reported exactly once.
#pragma once

#include <chrono>
#include <optional>

namespace ember::server {

class DrainController {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Phase { Serving, Draining, CuttingOff, Done };
  enum class SignalAction { BeginDrain, ExitNow };

  // drain_timeout: how long in-flight work may keep running. cutoff_grace: how long cancelled
  // requests get to write their honest endings before the drain completes anyway.
  DrainController(Clock::duration drain_timeout, Clock::duration cutoff_grace);

  SignalAction on_signal(Clock::time_point now);

  struct Step {
    bool cut_off = false;  // cancel every in-flight request now (reported once)
    bool done = false;     // shut the engine down and exit 0
  };
  // Call whenever in_flight changes and periodically while draining.
  Step poll(Clock::time_point now, int in_flight);

  Phase phase() const { return phase_; }
  bool draining() const { return phase_ != Phase::Serving; }
  std::optional<Clock::time_point> deadline() const { return deadline_; }

 private:
  Clock::duration drain_timeout_;
  Clock::duration cutoff_grace_;
  Phase phase_ = Phase::Serving;
  int signals_ = 0;
  std::optional<Clock::time_point> deadline_;
  std::optional<Clock::time_point> cutoff_at_;
};

}  // namespace ember::server
