// What a caller hands the engine (GenerateRequest) and what it gets back (events on a bounded
// per-request stream). The engine works on token ids only; text lives in text/.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "engine/cancel.h"

namespace ember::engine {

struct SamplingParams {
  float temperature = 0.8f;     // 0: greedy
  int32_t top_k = 40;           // 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float repeat_penalty = 1.0f;  // 1: off (applied over the last repeat_last_n tokens)
  int32_t repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Same seed + same params + same prompt = same tokens. The default is a constant, so engine
  // callers are reproducible unless they ask otherwise; the HTTP server draws a fresh seed for
  // every request that names none (server/completion.cc), and `ember run` for every run.
  uint64_t seed = 0xE3BE5EEDull;
  int32_t top_logprobs = 0;  // 0..20 alternatives reported per token
  // Report the chosen token's log-probability (a softmax over the vocabulary per token).
  // Callers that never read TokenEvent::logprob turn it off: greedy decode then costs one
  // argmax over the logits. top_logprobs > 0 implies it.
  bool logprobs = true;
  // Added to the raw logits before penalties and sampling (OpenAI logit_bias: -100..100).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// The ranges the engine samples with. The one owner of each check is where the values come in
// (the HTTP front, server/openai_request.cc, with the API's own narrower ranges; `ember run` on
// its flags): the engine trusts them and only asserts this. Which logit_bias ids exist depends
// on the model: that check is the engine's (SubmitError::InvalidRequest).
inline bool sampling_in_range(const SamplingParams& s) {
  return s.temperature >= 0.f && s.top_k >= 0 && s.top_p >= 0.f && s.top_p <= 1.f &&
         s.min_p >= 0.f && s.min_p <= 1.f && s.repeat_penalty > 0.f && s.top_logprobs >= 0 &&
         s.top_logprobs <= 20;
}

// Which tokens may come next, for grammar-constrained decoding (structured output, forced tool
// calls). Built outside the engine (text/ compiles a grammar against the vocabulary); the engine
// only asks it to mask a row of logits before sampling and tells it which token was kept. One
// instance belongs to one sequence and is used by the engine thread only.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logit of every token that may not come next to -infinity. Returns false when no
  // token at all may come next (the engine then ends the request with an error).
  virtual bool mask(std::span<float> logits) = 0;
  // Advances past `token`, which mask() allowed.
  virtual void accept(int32_t token) = 0;
  // Nothing more may follow: the engine ends the request with `stop` after this token.
  virtual bool complete() const = 0;
  // An independent copy in the same state, for a choice forked from this one (n > 1).
  virtual std::unique_ptr<TokenConstraint> clone() const = 0;
  // The source it was built from, for rebuilding it in another process (the worker protocol
  // carries this; worker/constraint.h builds both). Empty: it cannot cross a process boundary.
  virtual std::string spec() const { return {}; }
};

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  // Clipped by the engine (its one owner) to the room the context leaves after the prompt;
  // reaching it ends with `length`. INT32_MAX: as many as the context holds.
  int32_t max_tokens = 256;
  CancelToken cancel;  // CancelToken::never() by default
  // Cancelled with cause `deadline` at the first poll site past this instant.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Choices generated from this prompt (OpenAI `n`): the prompt is prefilled once and the
  // sequence forked after the prefill; choice i samples with seed sampling.seed + i.
  int32_t n = 1;
  std::shared_ptr<TokenConstraint> constraint;  // null: any token
};

enum class FinishReason { Stop, Length, Cancelled, Error };
enum class CancelCause { None, Client, Deadline, Shutdown, Budget, SlowConsumer };
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "cancelled", "error"
std::string_view cancel_cause_name(CancelCause c);    // "none", "client", "deadline", ...

struct TokenEvent {
  int32_t id = -1;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // top_logprobs alternatives, best first
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
};

// Where a cancelled request was when the engine released it: waiting for a slot, before a
// non-final prefill chunk, before the seed forward, or decoding.
enum class CancelPhase { Queued, Prefill, Seed, Decode };
std::string_view cancel_phase_name(CancelPhase p);  // "queued", "prefill", "seed", "decode"

struct Timings {
  double queued_ms = 0;   // submit -> admitted
  double prefill_ms = 0;  // admitted -> first token
  double decode_ms = 0;   // first token -> done
  // Cancelled requests only: from the earliest cancel request the engine knows of (the
  // token's cancel(), Engine::cancel, signal_shutdown, the deadline) to the release of the
  // request's resources; -1 otherwise.
  double cancel_ms = -1;
  CancelPhase cancel_phase = CancelPhase::Queued;
};

struct DoneEvent {
  FinishReason reason = FinishReason::Stop;
  CancelCause cause = CancelCause::None;
  Usage usage;
  Timings timings;
  std::string message;  // for Error (and a human-readable note for Cancelled)
  // Error only: the work was lost, not wrong (the subprocess client's worker died); a retry
  // may succeed, so the server answers 503 engine_restarting.
  bool retryable = false;
};

using Event = std::variant<TokenEvent, DoneEvent>;

}  // namespace ember::engine
