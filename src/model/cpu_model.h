// The CPU backend: weights stay in the GGUF mapping, activations of every token in a batch are
// gathered into one matrix so each weight matrix streams once per forward, and attention runs
// per item over that item's own sequence. One engine thread calls forward() at a time (the
// scratch buffers and the thread pool belong to the backend, not to a call).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "model/backend.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"

namespace ember::model {

// Where each layer's K and V live inside a CpuKvBlock. A block keeps its layers in two parts,
// each one allocation: the global layers' and the sliding-window layers' (either may have no
// layers). Shared by the backend and every block it made; blocks may outlive the backend (an
// engine's prefix cache during teardown), so they hold it by shared_ptr, with the live-bytes
// counter they report to.
struct CpuKvGeometry {
  enum Part : int32_t { kGlobal = 0, kSliding = 1 };
  CpuKvGeometry(const ModelConfig& cfg, int32_t tokens, int32_t dim, KvType type);
  int32_t n_layer, block_tokens, kv_dim, head_dim, n_head_kv;
  KvType type;
  size_t elem_bytes;                // 2 (f16) or 4 (f32)
  std::vector<int32_t> part;        // [n_layer] kGlobal or kSliding
  std::vector<int32_t> index;       // [n_layer] the layer's index within its part
  int32_t n_layers_in[2] = {0, 0};  // layers per part
  std::shared_ptr<std::atomic<int64_t>> live_bytes = std::make_shared<std::atomic<int64_t>>(0);
  size_t layer_bytes() const {
    return size_t{2} * size_t(block_tokens) * size_t(kv_dim) * elem_bytes;
  }
  size_t part_bytes(int32_t p) const { return size_t(n_layers_in[p]) * layer_bytes(); }
};

// One part's memory, [layers in the part][2 (K, V)][KV head][block_tokens][head_dim] elements of
// the KV type (IEEE half or f32): each head's rows of a block are one run, which attention reads
// as a stream (rows holding every head made a head's read skip through the others' bytes). Counts
// itself in the live bytes for as long as any block object holds it.
class CpuKvPart {
 public:
  CpuKvPart(std::shared_ptr<const CpuKvGeometry> geo, int32_t part);
  ~CpuKvPart();
  CpuKvPart(const CpuKvPart&) = delete;
  CpuKvPart& operator=(const CpuKvPart&) = delete;
  std::byte* data() const { return data_.get(); }
  int64_t bytes() const { return static_cast<int64_t>(n_bytes_); }

 private:
  std::shared_ptr<const CpuKvGeometry> geo_;
  size_t n_bytes_;
  std::unique_ptr<std::byte[]> data_;
};

// One KV block: its two parts. A whole block holds both; a sequence whose window has passed
// the block swaps it for a view without the sliding part (without_sliding()), which shares the
// global part, so the sliding memory is freed once no whole copy remains (the prefix cache may
// keep one).
class CpuKvBlock final : public KvBlock {
 public:
  // A whole block with fresh (uninitialised) memory.
  explicit CpuKvBlock(std::shared_ptr<const CpuKvGeometry> geo);
  std::vector<std::span<const uint8_t>> bytes() const override;  // whole blocks only
  int64_t unshared_bytes() const override;
  bool whole() const { return part_[1] != nullptr || geo_->n_layers_in[1] == 0; }
  // The same block without its sliding part (the global part shared with this one).
  std::shared_ptr<CpuKvBlock> without_sliding() const;
  int64_t held_bytes() const;  // bytes of the parts this object references
  // Layer il's K (kv 0) or V (kv 1) of KV head h from position `slot` (0 <= slot < block_tokens):
  // block_tokens - slot rows of head_dim elements of the KV type, one after the other. The
  // layer's part must be held.
  std::byte* rows(int32_t il, int32_t kv, int32_t h, int32_t slot) const {
    const CpuKvPart* p = part_[geo_->part[size_t(il)]].get();
    EMBER_ASSERT(p != nullptr);  // a dropped sliding part is never read or written
    const size_t run =
        (static_cast<size_t>(geo_->index[size_t(il)]) * 2 + kv) * geo_->n_head_kv + h;
    return p->data() +
           (run * geo_->block_tokens + slot) * size_t(geo_->head_dim) * geo_->elem_bytes;
  }
  // Layer il's K and V, layer_bytes() long.
  std::byte* layer(int32_t il) const { return rows(il, 0, 0, 0); }

 private:
  CpuKvBlock(std::shared_ptr<const CpuKvGeometry> geo, std::shared_ptr<CpuKvPart> global);
  std::shared_ptr<const CpuKvGeometry> geo_;
  std::shared_ptr<CpuKvPart> part_[2];  // [kGlobal], [kSliding]; null: dropped or no layers
};

// KV cache of one sequence: a list of blocks, allocated one at a time as positions are
// reserved (a short request does not pay for a long context). The first `shared` blocks came
// from elsewhere (a reused prefix) and are never written; blocks the sequence filled itself are
// handed out (block()) once full and are not written after that either, because positions only
// ever grow. Blocks below first_whole() have lost their sliding part (see Sequence).
class CpuSequence final : public Sequence {
 public:
  // `prefix`: full blocks for positions [0, prefix.size() * block_tokens); those a future
  // query can still see through a sliding layer must be whole.
  CpuSequence(const void* owner, std::shared_ptr<const CpuKvGeometry> geo, int32_t window,
              int32_t capacity, std::vector<std::shared_ptr<CpuKvBlock>> prefix);
  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }
  KvBlockRef block(int32_t i) const override;
  int64_t kv_bytes() const override;

  const void* owner() const { return owner_; }
  int32_t allocated() const { return static_cast<int32_t>(blocks_.size()) * block_tokens_; }
  int32_t first_whole() const { return first_whole_; }
  // Makes room for positions [0, n); n <= capacity.
  void reserve(int32_t n);
  void advance(int32_t n) { length_ += n; }
  // Drops the sliding part of every full block below `settled` (a length: blocks the caller
  // has had the chance to take whole) that no query at length() or later can see.
  void drop_outside_window(int32_t settled);
  // The block position pos is written to (never a shared block).
  CpuKvBlock* block_for_write(int32_t pos) { return writable(pos); }
  // Block b (read-only use by attention, and by fork_sequence).
  CpuKvBlock* block_at(int32_t b) const { return blocks_[static_cast<size_t>(b)].get(); }
  const std::shared_ptr<CpuKvBlock>& block_ref(int32_t b) const {
    return blocks_[static_cast<size_t>(b)];
  }
  int32_t block_tokens() const { return block_tokens_; }

 private:
  CpuKvBlock* writable(int32_t pos) {
    const int32_t b = pos / block_tokens_;
    EMBER_ASSERT(b >= shared_ && b < static_cast<int32_t>(blocks_.size()));
    return blocks_[static_cast<size_t>(b)].get();
  }
  const void* owner_;
  std::shared_ptr<const CpuKvGeometry> geo_;
  int32_t window_;  // sliding window (0: the model has no sliding layers, nothing is dropped)
  int32_t block_tokens_, capacity_;
  int32_t length_ = 0, shared_ = 0, first_whole_ = 0;
  // Blocks below shared_ came in as KvBlockRef (const) and are only read; writable() guards
  // the write path.
  std::vector<std::shared_ptr<CpuKvBlock>> blocks_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<const gguf::File> file, ModelConfig cfg, Weights w, int32_t n_ctx,
             int32_t n_threads, KvType kv_type);
  ~CpuBackend() override;
  CpuBackend(const CpuBackend&) = delete;
  CpuBackend& operator=(const CpuBackend&) = delete;
  const ModelConfig& config() const override { return cfg_; }
  int32_t n_ctx() const override { return n_ctx_; }
  const KvLayout& kv_layout() const override { return layout_; }
  std::unique_ptr<Sequence> new_sequence(int32_t capacity,
                                         std::span<const KvBlockRef> prefix = {}) override;
  Result<KvBlockRef> kv_block_from_bytes(std::span<const uint8_t> bytes) override;
  std::unique_ptr<Sequence> fork_sequence(const Sequence& src, int32_t capacity) override;
  Status forward(std::span<const ForwardItem> items, std::span<float> logits) override;
  int64_t live_kv_bytes() const override { return geo_->live_bytes->load(); }
  void settle_weights() override;
  int64_t weight_copy_bytes() const override {
    return w_.arena ? static_cast<int64_t>(w_.arena->used()) : 0;
  }
  void set_pool_timing(bool on) override { pool_.set_timing(on); }
  tensor::ThreadPool::Timing pool_timing() const override { return pool_.timing(); }
  // Starts copying the matrices into huge pages on a background thread (once, right after
  // construction); forward adopts the copies when they are done.
  void start_weight_copy();

 private:
  Status check(std::span<const ForwardItem> items, size_t n_logits) const;
  void prepare(std::span<const ForwardItem> items);
  void rope_tables();
  void layer(int32_t il);
  void store_kv(std::byte* dst, const float* src) const;  // one head's row, in the KV type
  void attention(int32_t il);
  template <typename T>
  void attention_as(int32_t il);
  void merge_parts(const float* parts, const float* stats, int32_t t, int32_t nc);
  void output(std::span<const ForwardItem> items, std::span<float> logits);
  void adopt_weight_copy();

  std::shared_ptr<const gguf::File> file_;  // keeps the weights mapped
  ModelConfig cfg_;
  Weights w_;
  int32_t n_ctx_;
  int32_t q_dim_, kv_dim_;
  KvLayout layout_;
  tensor::ThreadPool pool_;
  std::shared_ptr<const CpuKvGeometry> geo_;
  int32_t kv_window_;  // cfg_.sliding_window when some layer is sliding, else 0

  // Background weight copy: copier_ fills copied_ and then sets copy_done_ (release); the
  // forward thread reads copied_ only after seeing copy_done_ (acquire), moves it into w_ and
  // joins. copy_cancel_ stops a copy still running when the backend is destroyed.
  std::thread copier_;
  std::optional<Weights> copied_;
  std::atomic<bool> copy_done_{false};
  std::atomic<bool> copy_cancel_{false};

  // Per-forward scratch, grown as needed and reused (T = tokens in the batch).
  int64_t n_tok_ = 0;
  std::vector<int32_t> tok_item_;   // [T] item index of each token
  std::vector<int32_t> tok_pos_;    // [T] absolute position of each token
  std::vector<CpuSequence*> seqs_;  // [items]
  std::vector<float> x_;            // [T][n_embd] residual stream
  std::vector<float> xn_;           // [T][n_embd] normed input of a block
  std::vector<float> q_;            // [T][q_dim]
  std::vector<float> k_, v_;        // [T][kv_dim]
  std::vector<float> attn_;         // [T][q_dim]
  // One attention task (CpuBackend::attention_as): token t, its KV heads [h0, h1), queries
  // [g0, g0 + ng) of each head's group, chunks [c0, c1) of its range, chunk-major. row >= 0:
  // results go to attn_parts_ from that query row ([KV head][chunk][query] per token), merged
  // after the step; -1: the task merges its own.
  struct AttnTask {
    int32_t t, h0, h1, g0, ng, c0, c1;
    int64_t row;
  };
  std::vector<AttnTask> attn_tasks_;
  std::vector<float> attn_parts_, attn_stats_;        // [row][hd], [row][2]
  std::vector<float> o_;                              // [T][n_embd]
  std::vector<float> gate_, up_;                      // [T][n_ff]
  std::vector<float> cos_g_, sin_g_, cos_l_, sin_l_;  // [T][rope_dim / 2]
  std::vector<float> xo_;                             // [n_out][n_embd] rows that want logits
};

}  // namespace ember::model
