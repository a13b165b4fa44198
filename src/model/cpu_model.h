// The CPU backend: weights stay in the GGUF mapping, activations of every token in a batch are
// gathered into one matrix so each weight matrix streams once per forward, and attention runs
// per item over that item's own sequence. One engine thread calls forward() at a time (the
// scratch buffers and the thread pool belong to the backend, not to a call).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "model/backend.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace ember::model {

// One KV block, f32: [n_layer][2 (K, V)][block_tokens][kv_dim]. Counts itself in the backend's
// live bytes for as long as anyone (a sequence, the prefix cache) holds it.
class CpuKvBlock final : public KvBlock {
 public:
  CpuKvBlock(int32_t n_layer, int32_t block_tokens, int32_t kv_dim,
             std::shared_ptr<std::atomic<int64_t>> live_bytes);
  ~CpuKvBlock() override;
  std::span<const uint8_t> bytes() const override {
    return {reinterpret_cast<const uint8_t*>(data_.get()), n_floats_ * sizeof(float)};
  }
  float* data() { return data_.get(); }
  // Row of position `slot` (0 <= slot < block_tokens) of layer il.
  float* k(int32_t il, int32_t slot) const { return row(il, 0, slot); }
  float* v(int32_t il, int32_t slot) const { return row(il, 1, slot); }

 private:
  float* row(int32_t il, int32_t kv, int32_t slot) const {
    return data_.get() + ((static_cast<size_t>(il) * 2 + kv) * block_tokens_ + slot) * kv_dim_;
  }
  int32_t block_tokens_, kv_dim_;
  size_t n_floats_;
  std::unique_ptr<float[]> data_;
  std::shared_ptr<std::atomic<int64_t>> live_bytes_;
};

// KV cache of one sequence: a list of blocks, allocated one at a time as positions are
// reserved (a short request does not pay for a long context). The first `shared` blocks came
// from elsewhere (a reused prefix) and are never written; blocks the sequence filled itself are
// handed out (block()) once full and are not written after that either, because positions only
// ever grow.
class CpuSequence final : public Sequence {
 public:
  CpuSequence(const void* owner, int32_t n_layer, int32_t kv_dim, int32_t block_tokens,
              int32_t capacity, std::span<const KvBlockRef> prefix,
              std::shared_ptr<std::atomic<int64_t>> live_bytes);
  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }
  KvBlockRef block(int32_t i) const override;

  const void* owner() const { return owner_; }
  int32_t allocated() const { return static_cast<int32_t>(blocks_.size()) * block_tokens_; }
  // Makes room for positions [0, n); n <= capacity.
  void reserve(int32_t n);
  void advance(int32_t n) { length_ += n; }
  // Where position pos of layer il is written (never a shared block).
  float* k_slot(int32_t il, int32_t pos) { return writable(pos)->k(il, pos % block_tokens_); }
  float* v_slot(int32_t il, int32_t pos) { return writable(pos)->v(il, pos % block_tokens_); }
  // Block b (read-only use by attention).
  CpuKvBlock* block_at(int32_t b) const { return blocks_[static_cast<size_t>(b)].get(); }
  int32_t block_tokens() const { return block_tokens_; }

 private:
  CpuKvBlock* writable(int32_t pos) {
    const int32_t b = pos / block_tokens_;
    EMBER_ASSERT(b >= shared_ && b < static_cast<int32_t>(blocks_.size()));
    return blocks_[static_cast<size_t>(b)].get();
  }
  const void* owner_;
  int32_t n_layer_, kv_dim_, block_tokens_, capacity_;
  int32_t length_ = 0, shared_ = 0;
  // Blocks below shared_ came in as KvBlockRef (const) and are only read; writable() guards
  // the write path.
  std::vector<std::shared_ptr<CpuKvBlock>> blocks_;
  std::shared_ptr<std::atomic<int64_t>> live_bytes_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const gguf::File> file, ModelConfig cfg, Weights w, int32_t n_ctx,
             int32_t n_threads);
  const ModelConfig& config() const override { return cfg_; }
  int32_t n_ctx() const override { return n_ctx_; }
  const KvLayout& kv_layout() const override { return layout_; }
  std::unique_ptr<Sequence> new_sequence(int32_t capacity,
                                         std::span<const KvBlockRef> prefix = {}) override;
  Result<KvBlockRef> kv_block_from_bytes(std::span<const uint8_t> bytes) override;
  std::unique_ptr<Sequence> fork_sequence(const Sequence& src, int32_t capacity) override;
  Status forward(std::span<const ForwardItem> items, std::span<float> logits) override;
  int64_t live_kv_bytes() const override { return live_bytes_->load(); }

 private:
  Status check(std::span<const ForwardItem> items, size_t n_logits) const;
  void prepare(std::span<const ForwardItem> items);
  void rope_tables();
  void layer(int32_t il);
  void attention(int32_t il);
  void output(std::span<const ForwardItem> items, std::span<float> logits);

  std::shared_ptr<const gguf::File> file_;  // keeps the weights mapped
  ModelConfig cfg_;
  Weights w_;
  int32_t n_ctx_;
  int32_t q_dim_, kv_dim_;
  KvLayout layout_;
  tensor::ThreadPool pool_;
  std::shared_ptr<std::atomic<int64_t>> live_bytes_;

  // Per-forward scratch, grown as needed and reused (T = tokens in the batch).
  int64_t n_tok_ = 0;
  std::vector<int32_t> tok_item_;                     // [T] item index of each token
  std::vector<int32_t> tok_pos_;                      // [T] absolute position of each token
  std::vector<CpuSequence*> seqs_;                    // [items]
  std::vector<float> x_;                              // [T][n_embd] residual stream
  std::vector<float> xn_;                             // [T][n_embd] normed input of a block
  std::vector<float> q_;                              // [T][q_dim]
  std::vector<float> k_, v_;                          // [T][kv_dim]
  std::vector<float> attn_;                           // [T][q_dim]
  std::vector<float> o_;                              // [T][n_embd]
  std::vector<float> gate_, up_;                      // [T][n_ff]
  std::vector<float> cos_g_, sin_g_, cos_l_, sin_l_;  // [T][rope_dim / 2]
  std::vector<float> xo_;                             // [n_out][n_embd] rows that want logits
};

}  // namespace ember::model
