// EngineClient: what the server talks to. Two implementations: the
// in-process one (inprocess_client.h) wraps an engine::Engine in this process; the subprocess
// one (subprocess_client.h) speaks the worker protocol to `ember engine`. The server never
// sees which. The engine side owns the bookkeeping of in-flight requests: the server asks it
// to cancel them all at the drain deadline rather than keeping its own registry.
// See docs/architecture.md, "Layers".
//
// Contract: every method is thread-safe and non-blocking except submit() on the subprocess
// client (one round trip to the worker) and shutdown(). submit() either returns a stream that
// ends with exactly one DoneEvent, or an error. Dropping a stream before its DoneEvent cancels
// the request (cause client). After shutdown() returns, every stream has ended and submit()
// fails.
#pragma once

#include <cstdint>
#include <string>

#include "worker/types.h"

namespace ember::worker {

class EngineClient {
 public:
  virtual ~EngineClient() = default;
  virtual SubmitResult submit(GenerateRequest req) = 0;
  virtual void cancel(uint64_t id, CancelCause cause) = 0;
  // Cancels every request in flight (the drain deadline); returns how many.
  virtual int cancel_all(CancelCause cause) = 0;
  virtual EngineStats stats() const = 0;
  virtual const ModelInfo& model_info() const = 0;
  // Whether the engine side builds a request's TokenConstraint from its spec() itself (the
  // worker does): the caller then submits worker::unbuilt_constraint(spec) and compiles nothing.
  virtual bool builds_constraints() const { return false; }
  int32_t n_ctx() const { return model_info().n_ctx; }
  // Writes the warm-state file now, from the cache as it is (`ember restart` hands it to the
  // successor); blocks until written. Not ok when there is no cache or no warm directory.
  virtual engine::WarmReport save_warm() = 0;
  // Ends every request and stops the engine (the subprocess client runs its stop ladder);
  // idempotent; blocks until the engine has stopped.
  virtual void shutdown() = 0;
  // The second signal: stop the engine at once, whatever it is doing (async-safe enough to
  // call from a signal-handling thread while shutdown() runs elsewhere). Default: nothing.
  virtual void kill_now() {}
  // After shutdown(): how the engine stopped, for logs and `ember stop` ("eof (exit 0)").
  virtual std::string stop_description() const { return "in-process engine stopped"; }
};

}  // namespace ember::worker
