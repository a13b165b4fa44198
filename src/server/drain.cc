#include "server/drain.h"

namespace ember::server {

DrainController::DrainController(Clock::duration drain_timeout, Clock::duration cutoff_grace)
    : drain_timeout_(drain_timeout), cutoff_grace_(cutoff_grace) {}

DrainController::SignalAction DrainController::on_signal(Clock::time_point now) {
  if (++signals_ > 1) return SignalAction::ExitNow;
  phase_ = Phase::Draining;
  deadline_ = now + drain_timeout_;
  return SignalAction::BeginDrain;
}

DrainController::Step DrainController::poll(Clock::time_point now, int in_flight) {
  Step step;
  switch (phase_) {
    case Phase::Serving:
    case Phase::Done:
      break;
    case Phase::Draining:
      if (in_flight <= 0) {
        phase_ = Phase::Done;
        step.done = true;
      } else if (now >= *deadline_) {
        phase_ = Phase::CuttingOff;
        cutoff_at_ = now;
        step.cut_off = true;
      }
      break;
    case Phase::CuttingOff:
      if (in_flight <= 0 || now >= *cutoff_at_ + cutoff_grace_) {
        phase_ = Phase::Done;
        step.done = true;
      }
      break;
  }
  return step;
}

}  // namespace ember::server
