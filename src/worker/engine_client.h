// EngineClient: what the server talks to (DESIGN.md §1 layer 5). Two implementations: the
// in-process one (inprocess_client.h) wraps an engine::Engine in this process; the subprocess
// one (later) speaks the worker protocol to `ember engine`. The server never sees which.
//
// Contract: every method is thread-safe and non-blocking except shutdown(). submit() either
// returns a stream that will end with exactly one DoneEvent, or an error (overloaded, prompt too
// long, shutting down). After shutdown() returns, every stream has ended and submit() fails.
#pragma once

#include <cstdint>

#include "engine/engine.h"
#include "model/backend.h"

namespace ember::worker {

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  virtual engine::SubmitResult submit(engine::GenerateRequest req) = 0;
  virtual void cancel(uint64_t id, engine::CancelCause cause) = 0;
  virtual engine::EngineStats stats() const = 0;
  virtual const model::ModelConfig& model_config() const = 0;
  virtual int32_t n_ctx() const = 0;
  // Ends every request (cancelled, cause shutdown) and stops the engine; idempotent; blocks
  // until the engine has stopped.
  virtual void shutdown() = 0;
};

}  // namespace ember::worker
