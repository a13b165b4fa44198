#include "engine/request.h"

namespace ember::engine {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop:
      return "stop";
    case FinishReason::Length:
      return "length";
    case FinishReason::Cancelled:
      return "cancelled";
    case FinishReason::Error:
      return "error";
  }
  return "error";
}

std::string_view cancel_cause_name(CancelCause c) {
  switch (c) {
    case CancelCause::None:
      return "none";
    case CancelCause::Client:
      return "client";
    case CancelCause::Deadline:
      return "deadline";
    case CancelCause::Shutdown:
      return "shutdown";
    case CancelCause::Budget:
      return "budget";
    case CancelCause::SlowConsumer:
      return "slow_consumer";
  }
  return "none";
}

std::string_view cancel_phase_name(CancelPhase p) {
  switch (p) {
    case CancelPhase::Queued:
      return "queued";
    case CancelPhase::Prefill:
      return "prefill";
    case CancelPhase::Seed:
      return "seed";
    case CancelPhase::Decode:
      return "decode";
  }
  return "queued";
}

}  // namespace ember::engine
