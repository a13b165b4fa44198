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

// KV cache of one sequence, f32. Per layer one buffer of [alloc][n_head_kv * head_dim] for K and
// one for V (i.e. [n_layer][capacity][kv_dim] overall), grown on demand in chunks up to
// capacity so a short request does not pay for a long context.
class CpuSequence final : public Sequence {
 public:
  CpuSequence(const void* owner, int32_t n_layer, int32_t kv_dim, int32_t capacity,
              std::shared_ptr<std::atomic<int64_t>> live_bytes);
  ~CpuSequence() override;
  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }

  const void* owner() const { return owner_; }
  int32_t allocated() const { return alloc_; }
  // Makes room for positions [0, n); n <= capacity.
  void reserve(int32_t n);
  void advance(int32_t n) { length_ += n; }
  // Copies the KV of positions [0, src.length()) (same shape) and takes that length.
  void copy_from(const CpuSequence& src);
  float* k(int32_t il, int32_t pos) { return k_[il].get() + static_cast<size_t>(pos) * kv_dim_; }
  float* v(int32_t il, int32_t pos) { return v_[il].get() + static_cast<size_t>(pos) * kv_dim_; }

 private:
  const void* owner_;
  int32_t n_layer_, kv_dim_, capacity_;
  int32_t length_ = 0, alloc_ = 0;
  std::vector<std::unique_ptr<float[]>> k_, v_;  // [n_layer] -> [alloc][kv_dim]
  std::shared_ptr<std::atomic<int64_t>> live_bytes_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const gguf::File> file, ModelConfig cfg, Weights w, int32_t n_ctx,
             int32_t n_threads);
  const ModelConfig& config() const override { return cfg_; }
  int32_t n_ctx() const override { return n_ctx_; }
  std::unique_ptr<Sequence> new_sequence(int32_t capacity) override;
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
