#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/result.h"
#include "tensor/argmax.h"

namespace ember::engine {

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

// Orders candidate ids by logit, highest first; ties toward the lower id.
struct ByLogitDesc {
  const float* v;
  bool operator()(int32_t a, int32_t b) const { return v[a] > v[b] || (v[a] == v[b] && a < b); }
};

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : p_(params), n_vocab_(n_vocab), rng_(params.seed) {
  EMBER_ASSERT(n_vocab > 0);
}

void Sampler::add_prompt(std::span<const int32_t> prompt) {
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    history_.insert(history_.end(), prompt.begin(), prompt.end());
  }
}

void Sampler::accept(int32_t token) {
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) history_.push_back(token);
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) counts_[token]++;
}

bool Sampler::penalties_active() const {
  return (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0 && !history_.empty()) ||
         !counts_.empty();
}

void Sampler::apply_penalties(std::vector<float>& logits) const {
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0 && !history_.empty()) {
    size_t n = p_.repeat_last_n < 0 ? history_.size()
                                    : std::min(history_.size(), size_t(p_.repeat_last_n));
    std::vector<int32_t> window(history_.end() - static_cast<ptrdiff_t>(n), history_.end());
    std::sort(window.begin(), window.end());
    window.erase(std::unique(window.begin(), window.end()), window.end());
    for (int32_t t : window) {
      if (t < 0 || t >= n_vocab_) continue;
      float& l = logits[size_t(t)];
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  for (const auto& [t, c] : counts_) {
    if (t < 0 || t >= n_vocab_) continue;
    logits[size_t(t)] -=
        p_.presence_penalty * (c > 0 ? 1.f : 0.f) + p_.frequency_penalty * float(c);
  }
}

TokenChoice Sampler::sample(std::span<const float> logits) {
  EMBER_ASSERT(logits.size() == size_t(n_vocab_));
  TokenChoice c;
  if (p_.temperature <= 0.f && !penalties_active()) {
    c.token =
        tensor::argmax(logits.data(), n_vocab_);  // what draw() would pick from an unchanged copy
  } else {
    work_.assign(logits.begin(), logits.end());
    apply_penalties(work_);
    c.token = draw(work_);
  }
  if (p_.logprobs || p_.top_logprobs > 0) fill_logprobs(logits, c);
  return c;
}

int32_t Sampler::draw(const std::vector<float>& l) {
  const int32_t n = n_vocab_;
  if (p_.temperature <= 0.f) return tensor::argmax(l.data(), n);
  // Candidates sorted by logit, best first. Only the top k need ordering when top-k is on.
  idx_.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) idx_[size_t(i)] = i;
  size_t keep = size_t(n);
  ByLogitDesc cmp{l.data()};
  if (p_.top_k > 0 && p_.top_k < n) {
    keep = size_t(p_.top_k);
    std::partial_sort(idx_.begin(), idx_.begin() + ptrdiff_t(keep), idx_.end(), cmp);
  } else if (p_.top_p < 1.f || p_.min_p > 0.f) {
    std::sort(idx_.begin(), idx_.end(), cmp);
  }
  idx_.resize(keep);

  // Distribution before temperature, for top-p and min-p.
  auto softmax = [&](float temp) {
    probs_.resize(idx_.size());
    float mx = -std::numeric_limits<float>::infinity();
    for (int32_t id : idx_) mx = std::max(mx, l[size_t(id)] / temp);
    double sum = 0;
    for (size_t i = 0; i < idx_.size(); ++i) {
      probs_[i] = std::exp(l[size_t(idx_[i])] / temp - mx);
      sum += probs_[i];
    }
    for (auto& p : probs_) p = float(p / sum);
  };
  if (p_.top_p < 1.f) {
    softmax(1.f);
    double cum = 0;
    size_t cut = idx_.size();
    for (size_t i = 0; i < idx_.size(); ++i) {
      cum += probs_[i];
      if (cum >= p_.top_p) {
        cut = i + 1;
        break;
      }
    }
    idx_.resize(cut);
  }
  if (p_.min_p > 0.f && idx_.size() > 1) {
    // The best logit stays first (sorted), so p/p_max = exp(l - l_max).
    const float lmax = l[size_t(idx_[0])];
    const float floor = std::log(p_.min_p);
    size_t cut = 1;
    while (cut < idx_.size() && l[size_t(idx_[cut])] - lmax >= floor) ++cut;
    idx_.resize(cut);
  }
  softmax(p_.temperature);
  double u = rng_.uniform();
  double cum = 0;
  for (size_t i = 0; i < idx_.size(); ++i) {
    cum += probs_[i];
    if (u < cum) return idx_[i];
  }
  return idx_.back();  // rounding left u just past the sum
}

void Sampler::fill_logprobs(std::span<const float> raw, TokenChoice& c) const {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : raw) mx = std::max(mx, v);
  double sum = 0;
  for (float v : raw) sum += std::exp(double(v) - mx);
  const double lse = mx + std::log(sum);
  c.logprob = float(double(raw[size_t(c.token)]) - lse);
  int32_t k = std::clamp(p_.top_logprobs, 0, std::min(20, n_vocab_));
  if (k == 0) return;
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab_));
  for (int32_t i = 0; i < n_vocab_; ++i) ids[size_t(i)] = i;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), ByLogitDesc{raw.data()});
  c.top.reserve(size_t(k));
  for (int32_t i = 0; i < k; ++i) {
    c.top.emplace_back(ids[size_t(i)], float(double(raw[size_t(ids[size_t(i)])]) - lse));
  }
}

}  // namespace ember::engine
