// FakeBackend: a tiny deterministic model::Backend for engine tests. Its logits are a function
// of the WHOLE token history of the sequence (a rolling hash) and the position, so an engine
// that feeds the wrong tokens, mixes sequences in a batch or skips a chunk produces different
// tokens. It records every forward (for batching assertions), tracks live "KV" bytes, and can be
// told to fail a given forward call.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <memory>
#include <span>
#include "model/backend.h"

namespace ember::engine::testing {

namespace fake_detail {

class FakeSequence final : public model::Sequence {
 public:
  FakeSequence(uint64_t uid, int32_t capacity, int64_t bytes,
               std::shared_ptr<std::atomic<int64_t>> live)
      : uid_(uid), capacity_(capacity), bytes_(bytes), live_(std::move(live)) {
    live_->fetch_add(bytes_);
  }
  ~FakeSequence() override { live_->fetch_sub(bytes_); }
  int32_t length() const override { return int32_t(tokens.size()); }
  int32_t capacity() const override { return capacity_; }
  uint64_t uid() const { return uid_; }
  std::vector<int32_t> tokens;

 private:
  uint64_t uid_;
  int32_t capacity_;
  int64_t bytes_;
  std::shared_ptr<std::atomic<int64_t>> live_;
};

inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace fake_detail

struct FakeOptions {
  int32_t n_vocab = 64;
  int32_t n_ctx = 2048;
  float peak = 8.f;  // added to one favourite token: greedy is never decided by noise
  int64_t kv_bytes_per_token = 16;
  int64_t fail_on_call = -1;  // forward call index (0-based) that returns an error
};

struct ForwardRecord {
  struct Item {
    uint64_t seq_uid;
    int32_t start_pos;
    int32_t n_tokens;
    bool want_logits;
  };
  std::vector<Item> items;
};

class FakeBackend final : public model::Backend {
 public:
  explicit FakeBackend(FakeOptions o = {});

  const model::ModelConfig& config() const override { return cfg_; }
  int32_t n_ctx() const override { return opts_.n_ctx; }
  std::unique_ptr<model::Sequence> new_sequence(int32_t capacity) override;
  std::unique_ptr<model::Sequence> fork_sequence(const model::Sequence& src,
                                                 int32_t capacity) override;
  Status forward(std::span<const model::ForwardItem> items, std::span<float> logits) override;
  int64_t live_kv_bytes() const override { return live_bytes_->load(); }

  // The logits the fake produces after `history` (all tokens of a sequence so far).
  void logits_for(std::span<const int32_t> history, std::span<float> out) const;

  int64_t forward_calls() const { return calls_.load(); }
  int64_t sequences_created() const { return created_.load(); }
  int64_t sequences_forked() const { return forks_.load(); }
  std::vector<ForwardRecord> records() const {
    std::lock_guard lk(mu_);
    return records_;
  }

 private:
  FakeOptions opts_;
  model::ModelConfig cfg_;
  std::shared_ptr<std::atomic<int64_t>> live_bytes_ = std::make_shared<std::atomic<int64_t>>(0);
  std::atomic<int64_t> calls_{0}, created_{0}, forks_{0};
  mutable std::mutex mu_;
  std::vector<ForwardRecord> records_;
};

inline FakeBackend::FakeBackend(FakeOptions o) : opts_(o) {
  cfg_.arch_name = "fake";
  cfg_.name = "fake";
  cfg_.n_vocab = o.n_vocab;
  cfg_.n_ctx_train = o.n_ctx;
}

inline std::unique_ptr<model::Sequence> FakeBackend::new_sequence(int32_t capacity) {
  EMBER_ASSERT(capacity >= 1 && capacity <= opts_.n_ctx);
  uint64_t uid = uint64_t(created_.fetch_add(1));
  return std::make_unique<fake_detail::FakeSequence>(
      uid, capacity, capacity * opts_.kv_bytes_per_token, live_bytes_);
}

inline std::unique_ptr<model::Sequence> FakeBackend::fork_sequence(const model::Sequence& src,
                                                                   int32_t capacity) {
  const auto& from = dynamic_cast<const fake_detail::FakeSequence&>(src);
  EMBER_ASSERT(capacity >= from.length());
  forks_.fetch_add(1);
  auto seq = new_sequence(capacity);
  static_cast<fake_detail::FakeSequence&>(*seq).tokens = from.tokens;
  return seq;
}

inline void FakeBackend::logits_for(std::span<const int32_t> history, std::span<float> out) const {
  uint64_t h = 0x1234;
  for (int32_t t : history) h = fake_detail::mix(h * 31 + uint64_t(t) + 1);
  h = fake_detail::mix(h + history.size());
  for (int32_t v = 0; v < opts_.n_vocab; ++v) {
    // noise in [0, 2)
    out[size_t(v)] = float(fake_detail::mix(h + uint64_t(v)) >> 40) / float(1ull << 23);
  }
  out[size_t(h % uint64_t(opts_.n_vocab))] += opts_.peak;
}

inline Status FakeBackend::forward(std::span<const model::ForwardItem> items,
                                   std::span<float> logits) {
  const int64_t call = calls_.fetch_add(1);
  ForwardRecord rec;
  size_t row = 0;
  for (const auto& it : items) {
    auto* seq = dynamic_cast<fake_detail::FakeSequence*>(it.seq);
    EMBER_ASSERT(seq != nullptr && !it.tokens.empty());
    if (seq->length() + int32_t(it.tokens.size()) > seq->capacity()) {
      return fail("fake: sequence overflow ({} + {} > {})", seq->length(), it.tokens.size(),
                  seq->capacity());
    }
    rec.items.push_back({seq->uid(), seq->length(), int32_t(it.tokens.size()), it.want_logits});
  }
  {
    std::lock_guard lk(mu_);
    records_.push_back(rec);
  }
  if (call == opts_.fail_on_call) return fail("fake: injected failure on call {}", call);
  for (const auto& it : items) {
    auto* seq = static_cast<fake_detail::FakeSequence*>(it.seq);
    seq->tokens.insert(seq->tokens.end(), it.tokens.begin(), it.tokens.end());
    if (it.want_logits) {
      EMBER_ASSERT((row + 1) * size_t(opts_.n_vocab) <= logits.size());
      logits_for(seq->tokens, logits.subspan(row * size_t(opts_.n_vocab), size_t(opts_.n_vocab)));
      ++row;
    }
  }
  return {};
}

}  // namespace ember::engine::testing
