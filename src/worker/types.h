// The vocabulary of the server→worker seam: what the server hands an
// EngineClient and what it gets back. The server includes only worker/ headers; the request and
// event data types are the engine's plain structs, re-exported here, while everything about
// submitting (errors, stats, the model as the front sees it) is the worker layer's own, so both
// EngineClient implementations — in-process and subprocess — report in the same terms.
// See docs/architecture.md, "Layers".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cancel.h"
#include "engine/engine.h"
#include "engine/request.h"

namespace ember::worker {

using engine::cancel_cause_name;
using engine::cancel_phase_name;
using engine::CancelCause;
using engine::CancelOnDrop;
using engine::CancelPhase;
using engine::CancelToken;
using engine::DoneEvent;
using engine::Event;
using engine::EventStream;
using engine::finish_reason_name;
using engine::FinishReason;
using engine::GenerateRequest;
using engine::SamplingParams;
using engine::Timings;
using engine::TokenConstraint;
using engine::TokenEvent;
using engine::Usage;

struct SubmitError {
  enum class Kind {
    Overloaded,     // too many requests waiting: 429
    PromptTooLong,  // the prompt does not fit the context: 400
    InvalidRequest,
    ShuttingDown,       // the engine is stopping: 503
    EngineUnavailable,  // the worker is down or restarting: 503 engine_restarting
    BadConstraint,      // the output constraint's schema cannot be enforced: 400 (the
                        // front names the parameter); the message is the compiler's
  };
  Kind kind = Kind::InvalidRequest;
  std::string message;
};

struct SubmitResult {
  std::shared_ptr<EventStream> stream;  // set on success (choice 0)
  // Choices 1..n-1 of a request with n > 1 (engine.h): each its own id and stream.
  std::vector<std::shared_ptr<EventStream>> forks;
  std::optional<SubmitError> error;  // set on failure
  bool ok() const { return stream != nullptr; }
};

SubmitError from_engine(const engine::SubmitError& e);

struct EngineStats {
  int32_t active = 0;
  int32_t queued = 0;
  uint64_t steps = 0;  // forward passes so far (liveness: must advance); per worker lifetime
  uint64_t tokens_generated = 0;
  uint64_t prompt_tokens = 0;
  int64_t kv_bytes = 0;
  // Prefix cache and warm state (engine::EngineStats; per worker lifetime).
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t cache_evictions = 0;
  uint64_t cached_tokens = 0;
  int64_t cache_blocks = 0;
  int64_t cache_bytes = 0;
  int64_t warm_blocks_loaded = 0;
  double warm_load_seconds = 0;
  uint64_t warm_bytes_written = 0;
  double warm_save_seconds = 0;
  uint64_t worker_restarts = 0;  // subprocess client: workers started after the first
  bool available = true;         // false while the worker is down, restarting or loading
};

EngineStats from_engine(const engine::EngineStats& s);

// The model as the front needs it (the worker reports it once loaded).
struct ModelInfo {
  std::string arch_name;  // general.architecture
  std::string name;       // general.name (may be empty)
  int32_t n_ctx = 0;      // context in effect
};

}  // namespace ember::worker
