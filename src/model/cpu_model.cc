// The CPU forward pass for llama, qwen2, qwen3, gemma2, gemma3 and phi3 (see cpu_model.h for
// the batching scheme).
#include "model/cpu_model.h"

#include <pthread.h>
#include <latch>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <utility>

#include "model/fingerprint.h"
#include "model/ops.h"
#include "tensor/activation.h"
#include "tensor/attention.h"
#include "tensor/matmul.h"
#include "tensor/norm.h"
#include "tensor/quant.h"

namespace ember::model {

// ---- KV blocks and sequences ----

namespace {
constexpr int32_t kBlockTokens = 16;  // positions per KV block (the prefix cache's granularity)
// Attention splits a step's work into at least this many tasks per thread when it can
// (CpuBackend::attention_as).
constexpr int32_t kAttentionTasksPerThread = 2;
// Attention reads a query's range in chunks of this many positions at fixed absolute
// boundaries (multiples of it), one result per chunk merged in order
// (tensor::merge_attention_parts). The cut depends only on the positions, never on the batch or
// the threads, so a position's logits do not either; chunks are what lets a decode step's few
// (token, KV head) pairs spread over the threads without reading K and V twice. Ranges within
// one chunk compute exactly as without chunks.
constexpr int32_t kAttentionChunk = 256;
}  // namespace

std::string_view kv_type_name(KvType t) {
  return t == KvType::F16 ? "f16" : "f32";
}

std::optional<KvType> kv_type_from_name(std::string_view name) {
  if (name == "f16") return KvType::F16;
  if (name == "f32") return KvType::F32;
  return std::nullopt;
}

CpuKvGeometry::CpuKvGeometry(const ModelConfig& cfg, int32_t tokens, int32_t dim, KvType t)
    : n_layer(cfg.n_layer),
      block_tokens(tokens),
      kv_dim(dim),
      head_dim(cfg.head_dim),
      n_head_kv(cfg.n_head_kv),
      type(t),
      elem_bytes(t == KvType::F16 ? sizeof(uint16_t) : sizeof(float)) {
  for (int32_t il = 0; il < n_layer; ++il) {
    const int32_t p = cfg.is_sliding(il) ? kSliding : kGlobal;
    part.push_back(p);
    index.push_back(n_layers_in[p]++);
  }
}

CpuKvPart::CpuKvPart(std::shared_ptr<const CpuKvGeometry> geo, int32_t part)
    : geo_(std::move(geo)),
      n_bytes_(geo_->part_bytes(part)),
      data_(std::make_unique_for_overwrite<std::byte[]>(n_bytes_)) {
  geo_->live_bytes->fetch_add(bytes());
}

CpuKvPart::~CpuKvPart() {
  geo_->live_bytes->fetch_sub(bytes());
}

CpuKvBlock::CpuKvBlock(std::shared_ptr<const CpuKvGeometry> geo) : geo_(std::move(geo)) {
  for (int32_t p = 0; p < 2; ++p) {
    if (geo_->n_layers_in[p] > 0) part_[p] = std::make_shared<CpuKvPart>(geo_, p);
  }
}

CpuKvBlock::CpuKvBlock(std::shared_ptr<const CpuKvGeometry> geo, std::shared_ptr<CpuKvPart> global)
    : geo_(std::move(geo)) {
  part_[CpuKvGeometry::kGlobal] = std::move(global);
}

std::shared_ptr<CpuKvBlock> CpuKvBlock::without_sliding() const {
  return std::shared_ptr<CpuKvBlock>(new CpuKvBlock(geo_, part_[CpuKvGeometry::kGlobal]));
}

// Layer order, as one contiguous block would be laid out ([n_layer][2][KV head][block_tokens][hd]),
// so the bytes (and the warm-state file) do not depend on the split; consecutive layers of one
// part are adjacent in memory and come as one piece.
std::vector<std::span<const uint8_t>> CpuKvBlock::bytes() const {
  EMBER_ASSERT(whole());
  std::vector<std::span<const uint8_t>> out;
  const size_t layer_bytes = geo_->layer_bytes();
  for (int32_t il = 0; il < geo_->n_layer; ++il) {
    const auto* p = reinterpret_cast<const uint8_t*>(layer(il));
    if (!out.empty() && out.back().data() + out.back().size() == p) {
      out.back() = {out.back().data(), out.back().size() + layer_bytes};
    } else {
      out.emplace_back(p, layer_bytes);
    }
  }
  return out;
}

int64_t CpuKvBlock::unshared_bytes() const {
  int64_t n = 0;
  for (const auto& p : part_) n += p && p.use_count() == 1 ? p->bytes() : 0;
  return n;
}

int64_t CpuKvBlock::held_bytes() const {
  int64_t n = 0;
  for (const auto& p : part_) n += p ? p->bytes() : 0;
  return n;
}

CpuSequence::CpuSequence(const void* owner, std::shared_ptr<const CpuKvGeometry> geo,
                         int32_t window, int32_t capacity,
                         std::vector<std::shared_ptr<CpuKvBlock>> prefix)
    : owner_(owner),
      geo_(std::move(geo)),
      window_(window),
      block_tokens_(geo_->block_tokens),
      capacity_(capacity),
      blocks_(std::move(prefix)) {
  EMBER_ASSERT(static_cast<int64_t>(blocks_.size()) * block_tokens_ <= capacity);
  shared_ = static_cast<int32_t>(blocks_.size());
  length_ = shared_ * block_tokens_;
  blocks_.reserve(static_cast<size_t>((capacity + block_tokens_ - 1) / block_tokens_));
  drop_outside_window(length_);
  for (int32_t b = first_whole_; b < shared_; ++b) EMBER_ASSERT(block_at(b)->whole());
}

KvBlockRef CpuSequence::block(int32_t i) const {
  EMBER_ASSERT(i >= first_whole_ && (i + 1) * block_tokens_ <= length_);
  return blocks_[static_cast<size_t>(i)];
}

int64_t CpuSequence::kv_bytes() const {
  int64_t n = 0;
  for (const auto& b : blocks_) n += b->held_bytes();
  return n;
}

void CpuSequence::reserve(int32_t n) {
  EMBER_ASSERT(n <= capacity_);
  while (allocated() < n) blocks_.push_back(std::make_shared<CpuKvBlock>(geo_));
}

// Block b's last position, (b + 1) * B - 1, is visible from a query at pos >= length() only
// while pos - last < window, so it is out of every future window once last <= length() - window.
void CpuSequence::drop_outside_window(int32_t settled) {
  if (window_ <= 0) return;
  const int32_t B = block_tokens_;
  while ((first_whole_ + 1) * B <= std::min(settled, length_) &&
         (first_whole_ + 1) * B - 1 <= length_ - window_) {
    auto& blk = blocks_[static_cast<size_t>(first_whole_)];
    if (blk->whole()) blk = blk->without_sliding();
    ++first_whole_;
  }
}

// ---- CpuBackend ----

CpuBackend::CpuBackend(std::shared_ptr<const gguf::File> file, ModelConfig cfg, Weights w,
                       int32_t n_ctx, int32_t n_threads, KvType kv_type)
    : file_(std::move(file)),
      cfg_(std::move(cfg)),
      w_(std::move(w)),
      n_ctx_(n_ctx),
      q_dim_(cfg_.n_head * cfg_.head_dim),
      kv_dim_(cfg_.n_head_kv * cfg_.head_dim),
      pool_(n_threads),
      geo_(std::make_shared<const CpuKvGeometry>(cfg_, kBlockTokens, kv_dim_, kv_type)),
      kv_window_(geo_->n_layers_in[CpuKvGeometry::kSliding] > 0 ? cfg_.sliding_window : 0) {
  layout_.block_tokens = kBlockTokens;
  layout_.block_bytes = static_cast<int64_t>(geo_->layer_bytes()) * cfg_.n_layer;
  layout_.dtype = std::string(kv_type_name(kv_type));
  layout_.model_fingerprint = model_fingerprint(*file_, cfg_);
  layout_.context_key = kv_context_key(layout_, cfg_);
}

std::unique_ptr<Sequence> CpuBackend::new_sequence(int32_t capacity,
                                                   std::span<const KvBlockRef> prefix) {
  EMBER_ASSERT(capacity > 0 && capacity <= n_ctx_);
  std::vector<std::shared_ptr<CpuKvBlock>> blocks;
  blocks.reserve(prefix.size());
  for (const KvBlockRef& b : prefix) {
    auto cpu = std::dynamic_pointer_cast<const CpuKvBlock>(b);
    EMBER_ASSERT(cpu != nullptr && cpu->whole() && cpu->held_bytes() == layout_.block_bytes);
    // Shared blocks are only read (CpuSequence::writable guards the write path).
    blocks.push_back(std::const_pointer_cast<CpuKvBlock>(std::move(cpu)));
  }
  return std::make_unique<CpuSequence>(this, geo_, kv_window_, capacity, std::move(blocks));
}

Result<KvBlockRef> CpuBackend::kv_block_from_bytes(std::span<const uint8_t> bytes) {
  if (static_cast<int64_t>(bytes.size()) != layout_.block_bytes) {
    return fail("KV block has {} bytes; this model's blocks have {}", bytes.size(),
                layout_.block_bytes);
  }
  // Layer by layer, in the order bytes() gives them: a layer's K and V rows are contiguous.
  auto b = std::make_shared<CpuKvBlock>(geo_);
  const size_t layer_bytes = geo_->layer_bytes();
  for (int32_t il = 0; il < cfg_.n_layer; ++il) {
    std::memcpy(b->layer(il), bytes.data() + size_t(il) * layer_bytes, layer_bytes);
  }
  return KvBlockRef(std::move(b));
}

std::unique_ptr<Sequence> CpuBackend::fork_sequence(const Sequence& src, int32_t capacity) {
  const auto& from = static_cast<const CpuSequence&>(src);
  EMBER_ASSERT(from.owner() == this && capacity >= from.length() && capacity <= n_ctx_);
  // Full blocks never change again: the fork shares them (as the source holds them: those out
  // of the window without their sliding part). The partial last block is copied.
  const int32_t full = from.length() / kBlockTokens;
  std::vector<std::shared_ptr<CpuKvBlock>> prefix;
  prefix.reserve(static_cast<size_t>(full));
  for (int32_t b = 0; b < full; ++b) prefix.push_back(from.block_ref(b));
  auto seq = std::make_unique<CpuSequence>(this, geo_, kv_window_, capacity, std::move(prefix));
  const int32_t tail = from.length() - full * kBlockTokens;
  if (tail > 0) {
    seq->reserve(from.length());
    const CpuKvBlock* last = from.block_at(full);
    CpuKvBlock* to = seq->block_for_write(full * kBlockTokens);
    const size_t run = static_cast<size_t>(tail) * size_t(geo_->head_dim) * geo_->elem_bytes;
    for (int32_t il = 0; il < cfg_.n_layer; ++il) {
      for (int32_t kv = 0; kv < 2; ++kv) {
        for (int32_t h = 0; h < cfg_.n_head_kv; ++h) {
          std::memcpy(to->rows(il, kv, h, 0), last->rows(il, kv, h, 0), run);
        }
      }
    }
    seq->advance(tail);
  }
  return seq;
}

Status CpuBackend::check(std::span<const ForwardItem> items, size_t n_logits) const {
  size_t want = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const ForwardItem& it = items[i];
    EMBER_ASSERT(it.seq != nullptr);
    EMBER_ASSERT(static_cast<const CpuSequence*>(it.seq)->owner() == this);
    if (it.tokens.empty()) return fail("forward: item {} has no tokens", i);
    for (size_t j = 0; j < i; ++j) {
      if (items[j].seq == it.seq) return fail("forward: items {} and {} share a sequence", j, i);
    }
    const int64_t end = int64_t{it.seq->length()} + static_cast<int64_t>(it.tokens.size());
    if (end > it.seq->capacity()) {
      return fail("forward: item {} needs {} positions, the sequence holds {}", i, end,
                  it.seq->capacity());
    }
    for (int32_t t : it.tokens) {
      if (t < 0 || t >= cfg_.n_vocab) {
        return fail("forward: token id {} is out of range (vocabulary size {})", t, cfg_.n_vocab);
      }
    }
    if (it.want_logits) want += static_cast<size_t>(cfg_.n_vocab);
  }
  if (n_logits < want) {
    return fail("forward: logits buffer holds {} floats, {} needed", n_logits, want);
  }
  return {};
}

CpuBackend::~CpuBackend() {
  copy_cancel_.store(true, std::memory_order_relaxed);
  if (copier_.joinable()) copier_.join();
}

void CpuBackend::start_weight_copy() {
  EMBER_ASSERT(!copier_.joinable() && !w_.arena);
  // The thread gets its own Weights (pointers into the mapping); w_ is not touched until
  // adopt_weight_copy, on the forward thread. It is named before load returns: tests wait for
  // it to end (conftest.py, WeightPages), and a thread not yet named would read as ended.
  std::latch named(1);
  copier_ = std::thread([this, w = w_, c = cfg_, &named]() mutable {
    pthread_setname_np(pthread_self(), "ember-wcopy");
    named.count_down();  // the last use of `named`: start_weight_copy returns after it
    if (copy_weights_to_arena(&w, c, &copy_cancel_)) {
      file_->release_tensor_data();  // what the copy mapped around the vectors it read last
      copied_ = std::move(w);
      copy_done_.store(true, std::memory_order_release);
    }
  });
  named.wait();
}

void CpuBackend::adopt_weight_copy() {
  if (!copy_done_.load(std::memory_order_acquire) || !copied_) return;
  w_ = std::move(*copied_);  // same bytes: bit-identical
  copied_.reset();
  // The pages forwards read from the mapping while the copy ran: nothing reads it any more.
  file_->release_tensor_data();
  if (copier_.joinable()) copier_.join();  // copy_done_ was its last write
}

void CpuBackend::settle_weights() {
  if (copier_.joinable()) copier_.join();  // done, failed or cancelled: it ends either way
  adopt_weight_copy();
}

Status CpuBackend::forward(std::span<const ForwardItem> items, std::span<float> logits) {
  if (items.empty()) return {};
  EMBER_TRY_STATUS(check(items, logits.size()));
  adopt_weight_copy();
  prepare(items);
  for (int32_t il = 0; il < cfg_.n_layer; ++il) layer(il);
  output(items, logits);
  for (size_t i = 0; i < items.size(); ++i) {
    const int32_t before = seqs_[i]->length();
    seqs_[i]->advance(static_cast<int32_t>(items[i].tokens.size()));
    // Blocks full before this forward had their chance to be taken whole (Sequence::block);
    // those filled now keep their sliding part until the next forward.
    seqs_[i]->drop_outside_window(before);
  }
  return {};
}

namespace {
template <typename T>
void ensure(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}
}  // namespace

void CpuBackend::prepare(std::span<const ForwardItem> items) {
  int64_t T = 0;
  for (const auto& it : items) T += static_cast<int64_t>(it.tokens.size());
  n_tok_ = T;
  const size_t t = static_cast<size_t>(T);
  const size_t half = static_cast<size_t>(cfg_.rope_dim / 2);
  ensure(tok_item_, t);
  ensure(tok_pos_, t);
  ensure(x_, t * cfg_.n_embd);
  ensure(xn_, t * cfg_.n_embd);
  ensure(q_, t * q_dim_);
  ensure(k_, t * kv_dim_);
  ensure(v_, t * kv_dim_);
  ensure(attn_, t * q_dim_);
  ensure(o_, t * cfg_.n_embd);
  ensure(gate_, t * cfg_.n_ff);
  ensure(up_, t * cfg_.n_ff);
  ensure(cos_g_, t * half);
  ensure(sin_g_, t * half);
  ensure(cos_l_, t * half);
  ensure(sin_l_, t * half);
  seqs_.clear();

  const float embd_scale = is_gemma(cfg_.arch) ? std::sqrt(static_cast<float>(cfg_.n_embd)) : 1.f;
  int64_t row = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    auto* seq = static_cast<CpuSequence*>(items[i].seq);
    seqs_.push_back(seq);
    seq->drop_outside_window(seq->length());  // before allocating: the peak stays lower
    seq->reserve(seq->length() + static_cast<int32_t>(items[i].tokens.size()));
    for (size_t j = 0; j < items[i].tokens.size(); ++j, ++row) {
      tok_item_[row] = static_cast<int32_t>(i);
      tok_pos_[row] = seq->length() + static_cast<int32_t>(j);
      float* x = x_.data() + row * cfg_.n_embd;
      tensor::get_row(w_.token_embd, items[i].tokens[j], x);
      if (embd_scale != 1.f) {
        for (int32_t e = 0; e < cfg_.n_embd; ++e) x[e] *= embd_scale;
      }
    }
  }
  rope_tables();
}

// cos/sin of every rotated pair for every token, per rope base. The angle is built by repeated
// multiplication, as ggml does, so positions far into the context round the way llama.cpp's do.
void CpuBackend::rope_tables() {
  const int32_t half = cfg_.rope_dim / 2;
  auto fill = [&](float base, float freq_scale, float* cs, float* sn) {
    const float theta_scale = std::pow(base, -2.f / static_cast<float>(cfg_.rope_dim));
    for (int64_t t = 0; t < n_tok_; ++t) {
      float theta = static_cast<float>(tok_pos_[t]);
      for (int32_t i = 0; i < half; ++i) {
        const float ff = w_.rope_freqs ? w_.rope_freqs[i] : 1.f;
        const float a = freq_scale * theta / ff;
        cs[t * half + i] = std::cos(a) * cfg_.rope_attn_factor;
        sn[t * half + i] = std::sin(a) * cfg_.rope_attn_factor;
        theta *= theta_scale;
      }
    }
  };
  fill(cfg_.rope_base, cfg_.rope_freq_scale, cos_g_.data(), sin_g_.data());
  if (cfg_.sliding_window > 0) fill(cfg_.rope_base_local, 1.f, cos_l_.data(), sin_l_.data());
}

// Element-wise work runs across the pool too, by tokens: at prefill sizes it is a tenth of a
// step when run serially. kRowsPerChunk keeps small (decode) steps on the caller.
void CpuBackend::layer(int32_t il) {
  const LayerWeights& l = w_.layers[il];
  const int64_t T = n_tok_;
  const int32_t E = cfg_.n_embd, hd = cfg_.head_dim, half = cfg_.rope_dim / 2;
  const float eps = cfg_.norm_eps;
  constexpr int64_t kRowsPerChunk = 4;
  auto per_token = [&](auto&& fn) {
    pool_.parallel_for(T, kRowsPerChunk, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) fn(t);
    });
  };

  per_token([&](int64_t t) { tensor::rms_norm(&x_[t * E], l.attn_norm, &xn_[t * E], E, eps); });
  const tensor::MatmulOut qkv[] = {{&l.wq, q_.data()}, {&l.wk, k_.data()}, {&l.wv, v_.data()}};
  tensor::matmul(qkv, xn_.data(), T, pool_);

  const bool local = cfg_.is_sliding(il);
  const float* cs = local ? cos_l_.data() : cos_g_.data();
  const float* sn = local ? sin_l_.data() : sin_g_.data();
  per_token([&](int64_t t) {
    if (l.bq) ops::add(&q_[t * q_dim_], l.bq, q_dim_);
    if (l.bk) ops::add(&k_[t * kv_dim_], l.bk, kv_dim_);
    if (l.bv) ops::add(&v_[t * kv_dim_], l.bv, kv_dim_);
    for (int32_t h = 0; h < cfg_.n_head; ++h) {
      float* q = &q_[t * q_dim_ + h * hd];
      if (l.q_norm) tensor::rms_norm(q, l.q_norm, q, hd, eps);
      ops::rope_head(q, cs + t * half, sn + t * half, cfg_.rope_dim, cfg_.rope_neox);
    }
    for (int32_t h = 0; h < cfg_.n_head_kv; ++h) {
      float* k = &k_[t * kv_dim_ + h * hd];
      if (l.k_norm) tensor::rms_norm(k, l.k_norm, k, hd, eps);
      ops::rope_head(k, cs + t * half, sn + t * half, cfg_.rope_dim, cfg_.rope_neox);
    }
    CpuSequence* seq = seqs_[tok_item_[t]];  // each token writes its own cache position
    const int32_t pos = tok_pos_[t];
    CpuKvBlock* blk = seq->block_for_write(pos);
    for (int32_t h = 0; h < cfg_.n_head_kv; ++h) {
      store_kv(blk->rows(il, 0, h, pos % kBlockTokens), &k_[t * kv_dim_ + h * hd]);
      store_kv(blk->rows(il, 1, h, pos % kBlockTokens), &v_[t * kv_dim_ + h * hd]);
    }
  });

  attention(il);
  tensor::matmul(l.wo, attn_.data(), T, o_.data(), pool_);
  per_token([&](int64_t t) {
    float* o = &o_[t * E];
    if (l.post_attn_norm) tensor::rms_norm(o, l.post_attn_norm, o, E, eps);
    float* x = &x_[t * E];
    for (int32_t e = 0; e < E; ++e) x[e] += o[e];
    tensor::rms_norm(x, l.ffn_norm, &xn_[t * E], E, eps);
  });

  // The activation runs on each range of rows as soon as its gate and up are computed, on the
  // thread that computed them (tensor::matmul's rows function).
  const tensor::MatmulOut gate_up[] = {{&l.w_gate, gate_.data()}, {&l.w_up, up_.data()}};
  const int64_t F = cfg_.n_ff;
  const auto act = is_gemma(cfg_.arch) ? &tensor::gelu_mul : &tensor::silu_mul;
  tensor::matmul(gate_up, xn_.data(), T, pool_, [&](int64_t r0, int64_t r1) {
    for (int64_t t = 0; t < T; ++t) act(&gate_[t * F + r0], &up_[t * F + r0], r1 - r0);
  });
  tensor::matmul(l.w_down, gate_.data(), T, o_.data(), pool_);
  per_token([&](int64_t t) {
    float* o = &o_[t * E];
    if (l.post_ffn_norm) tensor::rms_norm(o, l.post_ffn_norm, o, E, eps);
    float* x = &x_[t * E];
    for (int32_t e = 0; e < E; ++e) x[e] += o[e];
  });
}

// A head's K or V row enters the cache in its type: f16 rounds to nearest even (F16C at the
// vector levels, bit-identical to the scalar conversion).
void CpuBackend::store_kv(std::byte* dst, const float* src) const {
  const int32_t hd = cfg_.head_dim;
  if (geo_->type == KvType::F16) {
    tensor::quantize_row(tensor::DType::F16, src, dst, hd);  // round to nearest even
  } else {
    std::memcpy(dst, src, static_cast<size_t>(hd) * sizeof(float));
  }
}

void CpuBackend::attention(int32_t il) {
  if (geo_->type == KvType::F16) {
    attention_as<uint16_t>(il);
  } else {
    attention_as<float>(il);
  }
}

// Causal attention of every token over its own sequence's cache, which already holds this
// chunk's keys and values. The query heads of a GQA group share the keys, the values and the
// causal range, so they run together (tensor::attend_group_segments), over the range [lo, pos]
// in chunks of kAttentionChunk positions (each read block by block as segments), merged in
// chunk order. A sliding layer reads only [pos - window + 1, pos], which never reaches a block
// whose sliding part the sequence dropped (CpuSequence::drop_outside_window keeps every block a
// query at length() or later can see; CpuKvBlock::rows asserts it), so reused and trimmed blocks
// are read exactly as fresh ones.
//
// A task runs chunk by chunk and, within a chunk, KV head by KV head, so a chunk's blocks are
// read for every head while they are at hand (measured faster than one head over the whole range at
// a time, in a throwaway harness, when a block's rows held every head). When a step has at least
// kAttentionTasksPerThread tokens per thread (prefill, large batches) a task is a token. Decode
// steps have fewer, and one thread ran them while the other idled: then a task is one chunk of a
// token (its results parked in attn_parts_ and merged after the step), or one KV head of a chunk,
// and only where that still leaves too few tasks (short ranges) is the group sliced too, at the
// cost of reading the head's K and V once per slice. A query's bits do not depend on its slice (the
// kernels compute queries independently and only share loads) nor on which task ran a chunk, so no
// logit depends on how the work was cut.
template <typename T>
void CpuBackend::attention_as(int32_t il) {
  const int32_t hd = cfg_.head_dim, n_kv = cfg_.n_head_kv;
  const int32_t group = cfg_.n_head / n_kv;
  const float scale =
      cfg_.attn_scale > 0.f ? cfg_.attn_scale : 1.f / std::sqrt(static_cast<float>(hd));
  const int32_t window = cfg_.is_sliding(il) ? cfg_.sliding_window : 0;
  constexpr int32_t C = kAttentionChunk;
  // llama.cpp's standard sliding window: key p is visible from pos when pos - p < window.
  auto lo_of = [&](int32_t pos) { return window > 0 ? std::max(0, pos - window + 1) : 0; };
  auto chunks_of = [&](int32_t pos) { return pos / C - lo_of(pos) / C + 1; };
  const int64_t want = int64_t{kAttentionTasksPerThread} * pool_.size();
  const bool per_token = n_tok_ >= want;
  // Tokens run last first: a token's work grows with its position, and the pool hands out
  // ranges in order, so in token order the heaviest came last and one thread ran it while the
  // other idled (heaviest first, the light ones fill the gaps at the end).
  attn_tasks_.clear();
  if (per_token) {
    for (int64_t i = 0; i < n_tok_; ++i) {
      const int32_t t = static_cast<int32_t>(n_tok_ - 1 - i);
      const int32_t pos = tok_pos_[size_t(t)];
      attn_tasks_.push_back({t, 0, n_kv, 0, group, lo_of(pos) / C, pos / C + 1, -1});
    }
  } else {
    int64_t chunks = 0;
    for (int64_t t = 0; t < n_tok_; ++t) chunks += chunks_of(tok_pos_[size_t(t)]);
    const int32_t heads_per = chunks >= want ? n_kv : 1;
    int32_t per = group;  // queries per slice
    if (chunks * n_kv < want) {
      const int64_t slices = std::min<int64_t>(group, (want + chunks * n_kv - 1) / (chunks * n_kv));
      per = static_cast<int32_t>((group + slices - 1) / slices);
    }
    int64_t rows = 0;  // query rows of attn_parts_ so far: [token][KV head][chunk][query]
    for (int64_t i = 0; i < n_tok_; ++i) {
      const int32_t t = static_cast<int32_t>(n_tok_ - 1 - i);
      const int32_t pos = tok_pos_[size_t(t)];
      for (int32_t c = lo_of(pos) / C; c <= pos / C; ++c) {
        for (int32_t h = 0; h < n_kv; h += heads_per) {
          for (int32_t g0 = 0; g0 < group; g0 += per) {
            attn_tasks_.push_back({t, h, std::min(h + heads_per, n_kv), g0,
                                   std::min(per, group - g0), c, c + 1, rows});
          }
        }
      }
      rows += int64_t{chunks_of(pos)} * n_kv * group;
    }
    if (attn_parts_.size() < size_t(rows * hd)) attn_parts_.resize(size_t(rows * hd));
    if (attn_stats_.size() < size_t(rows * 2)) attn_stats_.resize(size_t(rows * 2));
  }
  pool_.parallel_for(static_cast<int64_t>(attn_tasks_.size()), [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores, own_parts, own_stats;
    thread_local std::vector<tensor::KvSegmentOf<T>> segs;
    for (int64_t i = begin; i < end; ++i) {
      const AttnTask& task = attn_tasks_[size_t(i)];
      const CpuSequence* seq = seqs_[size_t(tok_item_[size_t(task.t)])];
      const int32_t pos = tok_pos_[size_t(task.t)];
      const int32_t lo = lo_of(pos), B = seq->block_tokens(), nc = chunks_of(pos);
      // Rows of this token's parts: [KV head][chunk][query], in attn_parts_ or the task's own.
      float* parts = nullptr;
      float* stats = nullptr;
      if (task.row >= 0) {
        parts = &attn_parts_[size_t(task.row * hd)];
        stats = &attn_stats_[size_t(task.row * 2)];
      } else if (nc > 1) {
        const size_t rows = size_t(n_kv) * size_t(nc) * size_t(group);
        if (own_parts.size() < rows * size_t(hd)) own_parts.resize(rows * size_t(hd));
        if (own_stats.size() < rows * 2) own_stats.resize(rows * 2);
        parts = own_parts.data();
        stats = own_stats.data();
      }
      for (int32_t c = task.c0; c < task.c1; ++c) {
        const int32_t first = std::max(lo, c * C), last = std::min(pos, c * C + C - 1);
        const int32_t n = last - first + 1;
        const size_t need = static_cast<size_t>(n) * static_cast<size_t>(task.ng);
        if (scores.size() < need) scores.resize(need);
        for (int32_t h = task.h0; h < task.h1; ++h) {
          segs.clear();
          for (int32_t p = first; p <= last;) {
            const int32_t slot = p % B;
            const int32_t m = std::min(B - slot, last - p + 1);
            const CpuKvBlock* blk = seq->block_at(p / B);
            segs.push_back({reinterpret_cast<const T*>(blk->rows(il, 0, h, slot)),
                            reinterpret_cast<const T*>(blk->rows(il, 1, h, slot)), m});
            p += m;
          }
          const int64_t q0 = (int64_t{h} * group + task.g0) * hd;
          float* out = &attn_[size_t(task.t * q_dim_ + q0)];
          float* st = nullptr;
          if (parts != nullptr) {
            const int64_t r = (int64_t{h} * nc + (c - lo / C)) * group + task.g0;
            out = parts + r * hd;
            st = stats + r * 2;
          }
          tensor::attend_group_segments(&q_[size_t(task.t * q_dim_ + q0)], hd, task.ng, segs.data(),
                                        static_cast<int32_t>(segs.size()), hd, n, hd, scale,
                                        scores.data(), out, hd, st, cfg_.attn_logit_softcap);
        }
      }
      if (task.row < 0 && parts != nullptr) merge_parts(parts, stats, task.t, nc);
    }
  });
  if (per_token) return;
  int64_t row = 0;
  for (int64_t i = 0; i < n_tok_; ++i) {
    const int32_t t = static_cast<int32_t>(n_tok_ - 1 - i);
    const int32_t nc = chunks_of(tok_pos_[size_t(t)]);
    merge_parts(&attn_parts_[size_t(row * hd)], &attn_stats_[size_t(row * 2)], t, nc);
    row += int64_t{nc} * n_kv * group;
  }
}

// Token t's attention output from its parts, rows [KV head][chunk][query] (nc chunks).
void CpuBackend::merge_parts(const float* parts, const float* stats, int32_t t, int32_t nc) {
  const int32_t hd = cfg_.head_dim, group = cfg_.n_head / cfg_.n_head_kv;
  for (int32_t h = 0; h < cfg_.n_head_kv; ++h) {
    for (int32_t g = 0; g < group; ++g) {
      const int64_t r = int64_t{h} * nc * group + g;
      tensor::merge_attention_parts(parts + r * hd, int64_t{group} * hd, stats + r * 2,
                                    int64_t{group} * 2, nc, hd,
                                    &attn_[size_t(t * q_dim_ + (int64_t{h} * group + g) * hd)]);
    }
  }
}

void CpuBackend::output(std::span<const ForwardItem> items, std::span<float> logits) {
  const int32_t E = cfg_.n_embd;
  size_t n_out = 0;
  int64_t row = 0;
  ensure(xo_, items.size() * E);
  for (const auto& it : items) {
    row += static_cast<int64_t>(it.tokens.size());
    if (!it.want_logits) continue;
    tensor::rms_norm(&x_[(row - 1) * E], w_.output_norm, &xo_[n_out * E], E, cfg_.norm_eps);
    ++n_out;
  }
  if (n_out == 0) return;
  tensor::matmul(w_.output, xo_.data(), static_cast<int64_t>(n_out), logits.data(), pool_);
  if (w_.output_b) {
    for (size_t r = 0; r < n_out; ++r) {
      ops::add(&logits[r * static_cast<size_t>(cfg_.n_vocab)], w_.output_b, cfg_.n_vocab);
    }
  }
  if (cfg_.final_logit_softcap > 0.f) {
    for (size_t r = 0; r < n_out; ++r) {
      tensor::ref::softcap_scores(&logits[r * static_cast<size_t>(cfg_.n_vocab)], cfg_.n_vocab,
                                  cfg_.final_logit_softcap);
    }
  }
}

// ---- loading ----

Result<std::unique_ptr<Backend>> load_cpu_model(std::shared_ptr<const gguf::File> file,
                                                const LoadOptions& opts) {
  EMBER_ASSERT(file != nullptr);
  EMBER_TRY(ModelConfig cfg, read_config(*file));
  EMBER_TRY(Weights w, bind_weights(*file, cfg));
  const bool background = opts.huge_page_weights && opts.copy_weights_in_background;
  // Where the copy fails the weights stay in the mapping. What the copy leaves mapped, the
  // fingerprint's release_tensor_data drops.
  if (opts.huge_page_weights && !background) copy_weights_to_arena(&w, cfg);
  if (opts.n_ctx < 0) return fail("{}: context size {} is negative", file->path(), opts.n_ctx);
  if (opts.n_threads < 0) return fail("n_threads {} is negative", opts.n_threads);
  const int32_t n_ctx = opts.n_ctx > 0 ? opts.n_ctx : std::min(cfg.n_ctx_train, 4096);
  if (cfg.arch == Arch::Phi3) {
    // llama.cpp's choice: the long factors once the context exceeds the original length.
    cfg.rope_long_factors = n_ctx > cfg.n_ctx_orig;
    w.rope_freqs = cfg.rope_long_factors ? w.rope_long : w.rope_short;
  }
  int32_t n_threads = opts.n_threads;
  if (n_threads == 0) n_threads = static_cast<int32_t>(std::thread::hardware_concurrency());
  auto backend = std::make_unique<CpuBackend>(std::move(file), std::move(cfg), std::move(w), n_ctx,
                                              std::max(1, n_threads), opts.kv_type);
  if (background) backend->start_weight_copy();
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace ember::model
