// The engine: one thread that owns the model backend, the KV sequences and the scheduler.
// Everyone else talks to it through its mailbox (submit / cancel / signal_shutdown) and reads
// results from a bounded per-request EventStream. The engine never blocks on a consumer.
//
// Each step: drain the mailbox (control messages — cancel, shutdown — before queued work),
// admit queued requests up to max_sequences, then one batched forward that advances every
// active sequence: one decode token for each decoding sequence plus at most one prefill chunk
// (prefill_chunk tokens) per prefilling sequence.
//
// Cancellation contract: each live request is polled at three sites, in the
// order poll -> hook -> re-poll -> work: before every prefill chunk, before the "seed" forward
// that yields the first token's logits, and before every decode step; the engine's shutdown
// flag is polled at the same sites. The residual, non-interruptible work of a cancelled
// request is therefore at most one prefill chunk, one seed forward, or one decode step.
// A request stopped before its first token produces zero tokens. Every admitted or queued
// request ends with exactly one DoneEvent, including at shutdown.
// See docs/architecture.md, "Cancellation contract".
//
// Details the contract leaves open, fixed here:
// - Cancel and shutdown do not wait in the mailbox: cancel(id) and signal_shutdown() set flags
//   the poll sites read directly, so they are seen even while the engine thread is blocked in
//   a hook (by the re-poll after it). A per-request CancelToken is read the same way.
// - The seed IS the last prefill chunk: a prompt is cut into prefill_chunk-sized chunks and the
//   final (possibly shorter) one is run as the seed step, polled with on_before_seed. Only the
//   non-final chunks fire on_before_prefill_chunk (positions 0, 512, 1024, ...); a prompt of at
//   most prefill_chunk tokens is a single seed step.
// - Each site counts exactly one poll of the request's token (is_cancelled); the re-poll after
//   the hook only peeks. So CancelToken::with_budget(n) allows n steps of that request (each
//   non-final prefill chunk, the seed and each decode step is one step): n tokens for a prompt
//   that fits one chunk. A tripped budget ends the request `cancelled` with cause `budget`.
// - Finish reasons: `stop` (an eog_tokens id was sampled; it is not emitted), `length`
//   (max_tokens, clipped to n_ctx - prompt tokens), `cancelled` (cause: client — token,
//   cancel(id) or the stream dropped; deadline; shutdown; budget; slow_consumer — the consumer
//   was event_queue_capacity tokens behind), `error` (the backend's forward failed; every
//   request in that batch ends with it, the engine carries on).
// - A request's resources (sequence, KV memory, slot, stats) are released BEFORE its DoneEvent
//   is pushed: once a consumer holds the DoneEvent, stats() and live_kv_bytes() no longer
//   count it.
// - Request ids are assigned 1, 2, 3, ... in submit order, per engine.
// - Prefix cache (EngineOptions::prefix_cache_bytes > 0; engine/prefix_cache.h): at admission a
//   request takes the longest cached run of full KV blocks that is a prefix of its prompt,
//   leaving at least one prompt token to compute (the seed), and prefills only the rest;
//   Usage::cached_tokens says how many. After every forward each sequence's newly full blocks
//   (prompt and generated tokens alike, so a conversation's next turn finds its history) are
//   added to the cache. Chunk positions then start at the cached length. Output is
//   bit-identical with and without a hit (the backend computes each position's KV the same
//   way whatever the batch), which the engine tests check on every architecture.
// - Warm state (EngineOptions::warm, engine/warm_cache.h): loaded in the constructor, before
//   the engine serves; saved when the engine thread ends (after signal_shutdown or at
//   destruction), once every request has ended. Both bounded by warm.io_budget; a missing,
//   bad or foreign file is a log line and a cold start, never an error.
// - n > 1: the n choices are admitted together (they need n sequence slots) and prefilled
//   once; at the seed the sequence is forked through Backend::fork_sequence, and every choice
//   samples its first token from the same logits with its own sampler (seed + i) and its own
//   copy of the TokenConstraint. Pending choices are polled (peeked) when they fork.
// - logit_bias, then the TokenConstraint's mask, shape a copy of the logits before sampling,
//   inside the step (after its poll site); log-probabilities describe the shaped logits.
// - The residual bound is a bound in steps, not in time: its wall time is that of one chunk or
//   one step of the model in use (a 512-token chunk of a big model on a CPU takes seconds).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/cancel.h"
#include "engine/request.h"
#include "engine/warm_cache.h"
#include "model/backend.h"

namespace ember::engine {

// Test hooks. Snapshotted when a request is admitted; may block (a test holds
// a barrier there); must not call back into the engine's control plane (submit, cancel, the
// warm-state calls, signal_shutdown, destruction). Production builds pay one null check per
// site.
// See docs/architecture.md, "Cancellation contract".
struct GenHooks {
  // request id, position of the first token of the chunk (0, 512, 1024, ...)
  std::function<void(uint64_t id, int32_t chunk_pos)> on_before_prefill_chunk;
  std::function<void(uint64_t id)> on_before_seed;
  // request id, index of the token this step will produce (0 = the token after the first)
  std::function<void(uint64_t id, int32_t step)> on_before_decode_step;
};

// The defaults below are the engine settings table's (worker/engine_settings.h), for engines
// built without settings; tests/worker/engine_settings_test.cc asserts they stay equal.
// prefix_cache_bytes and warm are off here (the table's --kv-cache-bytes is on for a server).
struct EngineOptions {
  int32_t max_sequences = 8;            // active (prefilling or decoding) at once
  int32_t max_queued = 64;              // waiting for admission; beyond: overloaded
  int32_t prefill_chunk = 512;          // tokens per prefill chunk
  int32_t event_queue_capacity = 1024;  // per request; a consumer this far behind: slow_consumer
  std::vector<int32_t> eog_tokens;      // end-of-generation ids: finish with `stop`
  int64_t prefix_cache_bytes = 0;       // KV bytes the prefix cache may keep; 0: no cache
  WarmCacheOptions warm;                // warm state file; needs the prefix cache
};

// Consumer side of one request's bounded event queue. Thread-safe.
class EventStream {
 public:
  virtual ~EventStream() = default;
  virtual uint64_t id() const = 0;
  // Blocks until an event is available; nullopt once the DoneEvent has been taken.
  virtual std::optional<Event> next() = 0;
  virtual std::optional<Event> try_next() = 0;
  // Called from the engine thread after each push (and at the end); must not block.
  // Set it before the first event can arrive, or call try_next() after setting it.
  virtual void set_waker(std::function<void()> waker) = 0;
};

struct SubmitError {
  enum class Kind { Overloaded, PromptTooLong, InvalidRequest, ShuttingDown };
  Kind kind = Kind::InvalidRequest;
  std::string message;  // e.g. "prompt has 2049 tokens; context is 2048"
};

struct SubmitResult {
  std::shared_ptr<EventStream> stream;  // set on success (choice 0)
  // Choices 1..n-1 of a request with n > 1, each its own request id and stream ending with its
  // own DoneEvent. They share the request's CancelToken; cancel(id) stops one choice.
  std::vector<std::shared_ptr<EventStream>> forks;
  std::optional<SubmitError> error;  // set on failure
  bool ok() const { return stream != nullptr; }
};

struct EngineStats {
  int32_t active = 0;
  int32_t queued = 0;
  uint64_t steps = 0;  // forward passes run so far (liveness: must advance)
  uint64_t tokens_generated = 0;
  uint64_t prompt_tokens = 0;
  int64_t kv_bytes = 0;  // KV memory of live sequences (blocks only the prefix cache holds:
                         // cache_bytes); 0 when idle
  // Prefix cache.
  uint64_t cache_hits = 0;    // admissions that reused at least one block
  uint64_t cache_misses = 0;  // admissions that could have reused blocks and found none
  uint64_t cache_evictions = 0;
  uint64_t cached_tokens = 0;  // prompt tokens served from the cache
  int64_t cache_blocks = 0;
  int64_t cache_bytes = 0;
  // Warm state.
  int64_t warm_blocks_loaded = 0;
  double warm_load_seconds = 0;
  uint64_t warm_bytes_written = 0;  // by saves in this process
  double warm_save_seconds = 0;     // of the last save
};

class Engine {
 public:
  Engine(std::shared_ptr<model::Backend> backend, EngineOptions opts);
  ~Engine();  // signals shutdown, ends every request with a terminal event, joins the thread
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  SubmitResult submit(GenerateRequest req);
  void cancel(uint64_t id, CancelCause cause = CancelCause::Client);
  // Cancels every queued or active request (the drain deadline); returns how many.
  int cancel_all(CancelCause cause);
  void signal_shutdown();  // idempotent; in-flight requests end `cancelled` (shutdown)
  void set_hooks(GenHooks hooks);
  // Warm state by hand (the constructor and the thread's end do it when EngineOptions::warm
  // says so). Runs on the engine thread between steps (inline once the thread has ended);
  // blocks until done. Never fails the engine: the report says what happened.
  WarmReport load_warm_state();
  WarmReport save_warm_state();
  EngineStats stats() const;
  const model::ModelConfig& model_config() const;
  int32_t n_ctx() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::engine
