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
  o.cache_hits = s.cache_hits;
  o.cache_misses = s.cache_misses;
  o.cache_evictions = s.cache_evictions;
  o.cached_tokens = s.cached_tokens;
  o.cache_blocks = s.cache_blocks;
  o.cache_bytes = s.cache_bytes;
  o.warm_blocks_loaded = s.warm_blocks_loaded;
  o.warm_load_seconds = s.warm_load_seconds;
  o.warm_bytes_written = s.warm_bytes_written;
  o.warm_save_seconds = s.warm_save_seconds;
  return o;
}

}  // namespace ember::worker
