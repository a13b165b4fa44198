#include "worker/types.h"

namespace ember::worker {

SubmitError from_engine(const engine::SubmitError& e) {
  using K = engine::SubmitError::Kind;
  using W = SubmitError::Kind;
  W kind = W::InvalidRequest;
  switch (e.kind) {
    case K::Overloaded:
      kind = W::Overloaded;
      break;
    case K::PromptTooLong:
      kind = W::PromptTooLong;
      break;
    case K::InvalidRequest:
      kind = W::InvalidRequest;
      break;
    case K::ShuttingDown:
      kind = W::ShuttingDown;
      break;
  }
  return {kind, e.message};
}

EngineStats from_engine(const engine::EngineStats& s) {
  EngineStats o;
  o.active = s.active;
  o.queued = s.queued;
  o.steps = s.steps;
  o.tokens_generated = s.tokens_generated;
  o.prompt_tokens = s.prompt_tokens;
  o.kv_bytes = s.kv_bytes;
  return o;
}

}  // namespace ember::worker
