// FakeBackend: a tiny deterministic model::Backend for engine tests. Its logits are a function
// of the WHOLE token history of the sequence (a rolling hash) and the position, so an engine
// that feeds the wrong tokens, mixes sequences in a batch or skips a chunk produces different
// tokens. It records every forward (for batching assertions), tracks live "KV" bytes, and can be
// told to fail a given forward call.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <memory>
#include <span>
#include "model/backend.h"

namespace ember::engine::testing {

namespace fake_detail {

// A fake KV block: the token ids of its positions are its bytes, so a sequence built on reused
// blocks has exactly the history those blocks claim, and a wrong block gives other logits.
class FakeBlock final : public model::KvBlock {
 public:
  FakeBlock(std::vector<int32_t> toks, int64_t bytes, std::shared_ptr<std::atomic<int64_t>> live)
      : toks_(std::move(toks)), bytes_(bytes), live_(std::move(live)) {
    live_->fetch_add(bytes_);
  }
  ~FakeBlock() override { live_->fetch_sub(bytes_); }
  std::vector<std::span<const uint8_t>> bytes() const override {
    return {{reinterpret_cast<const uint8_t*>(toks_.data()), toks_.size() * sizeof(int32_t)}};
  }
  int64_t unshared_bytes() const override { return int64_t(toks_.size() * sizeof(int32_t)); }
  const std::vector<int32_t>& tokens() const { return toks_; }

 private:
  std::vector<int32_t> toks_;
  int64_t bytes_;
  std::shared_ptr<std::atomic<int64_t>> live_;
};

class FakeSequence final : public model::Sequence {
 public:
  FakeSequence(uint64_t uid, int32_t capacity, int64_t bytes, int32_t block_tokens,
               std::shared_ptr<std::atomic<int64_t>> live)
      : uid_(uid),
        capacity_(capacity),
        bytes_(bytes),
        block_tokens_(block_tokens),
        live_(std::move(live)) {
    live_->fetch_add(bytes_);
  }
  ~FakeSequence() override { live_->fetch_sub(bytes_); }
  int32_t length() const override { return int32_t(tokens.size()); }
  int32_t capacity() const override { return capacity_; }
  model::KvBlockRef block(int32_t i) const override {
    EMBER_ASSERT((i + 1) * block_tokens_ <= length());
    while (blocks.size() <= size_t(i)) {
      const size_t b = blocks.size();
      std::vector<int32_t> t(tokens.begin() + long(b * size_t(block_tokens_)),
                             tokens.begin() + long((b + 1) * size_t(block_tokens_)));
      blocks.push_back(std::make_shared<FakeBlock>(std::move(t), 0, live_));
    }
    return blocks[size_t(i)];
  }
  int64_t kv_bytes() const override { return bytes_; }
  uint64_t uid() const { return uid_; }
  std::vector<int32_t> tokens;
  mutable std::vector<model::KvBlockRef> blocks;  // handed out or reused, in position order

 private:
  uint64_t uid_;
  int32_t capacity_;
  int64_t bytes_;
  int32_t block_tokens_;
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
  int32_t block_tokens = 4;
  uint64_t context_key = 0xC0FFEE;  // another value: "another model"
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
  const model::KvLayout& kv_layout() const override { return layout_; }
  std::unique_ptr<model::Sequence> new_sequence(
      int32_t capacity, std::span<const model::KvBlockRef> prefix = {}) override;
  Result<model::KvBlockRef> kv_block_from_bytes(std::span<const uint8_t> bytes) override {
    if (int64_t(bytes.size()) != layout_.block_bytes) return fail("fake: bad block size");
    std::vector<int32_t> t(size_t(layout_.block_tokens));
    std::memcpy(t.data(), bytes.data(), bytes.size());
    return model::KvBlockRef(
        std::make_shared<fake_detail::FakeBlock>(std::move(t), 0, live_bytes_));
  }
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
  model::KvLayout layout_;
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
  layout_.block_tokens = o.block_tokens;
  layout_.block_bytes = o.block_tokens * int64_t(sizeof(int32_t));
  layout_.dtype = "fake";
  layout_.model_fingerprint = o.context_key ^ 1;
  layout_.context_key = o.context_key;
}

inline std::unique_ptr<model::Sequence> FakeBackend::new_sequence(
    int32_t capacity, std::span<const model::KvBlockRef> prefix) {
  EMBER_ASSERT(capacity >= 1 && capacity <= opts_.n_ctx);
  uint64_t uid = uint64_t(created_.fetch_add(1));
  auto seq = std::make_unique<fake_detail::FakeSequence>(
      uid, capacity, capacity * opts_.kv_bytes_per_token, opts_.block_tokens, live_bytes_);
  for (const auto& b : prefix) {
    auto* fb = dynamic_cast<const fake_detail::FakeBlock*>(b.get());
    EMBER_ASSERT(fb != nullptr);
    seq->tokens.insert(seq->tokens.end(), fb->tokens().begin(), fb->tokens().end());
    seq->blocks.push_back(b);
  }
  return seq;
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
