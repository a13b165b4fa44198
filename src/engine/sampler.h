// Sampler: turns one row of logits into a token, per request, deterministically.
//
// Pipeline (llama.cpp order): penalties -> greedy (temperature <= 0: argmax) or
// top-k -> top-p -> min-p -> temperature -> draw from the per-request PRNG.
// - repetition (llama.cpp style): each distinct token among the last repeat_last_n tokens of
//   prompt + completion has a positive logit divided by, a negative one multiplied by,
//   repeat_penalty. repeat_last_n < 0 means the whole history, 0 disables it.
// - presence / frequency (OpenAI style): logit -= presence * [count > 0] + frequency * count,
//   where count is how often the token occurs in the completion so far (not the prompt).
// - top-p and min-p act on the distribution before temperature (as llama.cpp does).
// - Ties break toward the lower token id, so equal inputs always give equal outputs.
// Greedy without penalties (the common benchmark and tool-call setting) is a plain argmax over
// the raw logits with no copy, and with SamplingParams::logprobs off no softmax either: the
// same token as the full pipeline, and TokenChoice::logprob stays 0.
// Log-probabilities (of the chosen token and the top_logprobs alternatives) are the log-softmax
// of the model's RAW logits — before penalties, temperature and truncation — so they describe
// the model, not the sampling settings, and a greedy and a sampled run report the same values
// for the same token. (vLLM's default makes the same choice.)
// PRNG: xoshiro256** seeded through splitmix64 from SamplingParams::seed; one per request, so
// a request's draws never depend on what else is in the batch.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace ember::engine {

// xoshiro256** (Blackman & Vigna), seeded with splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1), 53 bits

 private:
  uint64_t s_[4];
};

struct TokenChoice {
  int32_t token = -1;
  float logprob = 0.f;
  std::vector<std::pair<int32_t, float>> top;  // best first; empty unless top_logprobs > 0
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int32_t n_vocab);

  // Seeds the repetition window with the prompt (presence/frequency ignore the prompt).
  void add_prompt(std::span<const int32_t> prompt);
  // logits: [n_vocab]. Does not record the choice; call accept() with what was kept.
  TokenChoice sample(std::span<const float> logits);
  void accept(int32_t token);

  const SamplingParams& params() const { return p_; }

 private:
  bool penalties_active() const;
  void apply_penalties(std::vector<float>& logits) const;
  int32_t draw(const std::vector<float>& logits);
  void fill_logprobs(std::span<const float> raw, TokenChoice& c) const;

  SamplingParams p_;
  int32_t n_vocab_;
  Rng rng_;
  std::vector<int32_t> history_;                 // prompt + accepted tokens
  std::unordered_map<int32_t, int32_t> counts_;  // completion token -> occurrences
  // scratch, reused across calls
  std::vector<float> work_;
  std::vector<int32_t> idx_;
  std::vector<float> probs_;
};

}  // namespace ember::engine
