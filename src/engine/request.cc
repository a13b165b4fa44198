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

}  // namespace ember::engine
