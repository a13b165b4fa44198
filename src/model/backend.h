// The narrow interface between the engine and a forward pass: the model
// description, weights and KV layout stay behind it; token ids go in, logits come out. The CPU
// implementation is in model/cpu_model.*; a CUDA one can join later without the engine changing.
// See docs/architecture.md, "The forward pass".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "gguf/reader.h"
#include "tensor/thread_pool.h"

namespace ember::model {

enum class Arch { Llama, Qwen2, Qwen3, Gemma2, Gemma3, Phi3 };

// general.architecture names of the architectures above (the table in model/config.cc);
// nullopt for any other name.
std::optional<Arch> arch_from_name(std::string_view name);
// gemma2 and gemma3 share the embedding scale (sqrt(n_embd)), GELU and the post-norms.
inline bool is_gemma(Arch a) {
  return a == Arch::Gemma2 || a == Arch::Gemma3;
}
// "llama, qwen2, qwen3, gemma2, gemma3, phi3": what an unsupported-architecture error lists.
std::string supported_arch_names();

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;  // general.architecture
  std::string name;       // general.name (may be empty)
  int32_t n_vocab = 0;
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;
  float norm_eps = 1e-5f;
  float rope_base = 10000.f;
  float rope_base_local = 10000.f;  // gemma2/3 sliding-window layers
  int32_t sliding_window = 0;       // gemma2/3: 0 = none
  // gemma2/3: [n_layer], 1 for a layer that uses the sliding window and rope_base_local
  std::vector<uint8_t> sliding_layers;
  float attn_scale = 0.f;  // 0 = 1/sqrt(head_dim)
  bool tied_output = false;
  // Added by the model layer:
  int32_t rope_dim = 0;         // dimensions rotated per head ({arch}.rope.dimension_count)
  bool rope_neox = false;       // rotate (i, i + rope_dim/2) pairs, not (2i, 2i+1)
  float rope_freq_scale = 1.f;  // linear rope scaling (1/factor); gemma2/3: global layers only
  bool has_rope_freqs = false;  // llama3: rope_freqs.weight divides each frequency
  // phi3 LongRoPE: rope_factors_long.weight divides each frequency when the context exceeds
  // n_ctx_orig (rope.scaling.original_context_length), rope_factors_short.weight otherwise
  // (rope_long_factors, set at load), and cos and sin are scaled by rope_attn_factor.
  int32_t n_ctx_orig = 0;
  bool rope_long_factors = false;
  float rope_attn_factor = 1.f;
  float final_logit_softcap = 0.f;  // 0 = none; else logits = c * tanh(logits / c)
  float attn_logit_softcap = 0.f;   // gemma2: 0 = none; else scores = c * tanh(scores / c)
  // gemma3: true when layer il uses the sliding window and the local rope base.
  bool is_sliding(int32_t il) const {
    return sliding_window > 0 && il >= 0 && static_cast<size_t>(il) < sliding_layers.size() &&
           sliding_layers[static_cast<size_t>(il)] != 0;
  }
};

// KV memory comes in fixed-size blocks: one block holds every layer's K and V for
// KvLayout::block_tokens consecutive positions of one sequence. A block is written only while
// its sequence fills it; once full it is immutable and may be shared (the prefix cache, other
// sequences that reuse the prefix, a file of warm state). Shared ownership = reference count.
//
// A backend may keep a block's layers in more than one allocation, so that a sequence can let
// go of the sliding-window layers' part once no future query can see it while the global
// layers' part (and the whole block, in the prefix cache) lives on; see Sequence::block.
class KvBlock {
 public:
  virtual ~KvBlock() = default;
  // The block's KvLayout::block_bytes bytes of KV data, in order, as one or more pieces (their
  // concatenation is what kv_block_from_bytes takes back).
  virtual std::vector<std::span<const uint8_t>> bytes() const = 0;
  // Bytes of this block's memory that no other block object shares: what dropping the last
  // reference to this object frees. Less than block_bytes when a sequence holds a view of part
  // of it (its global layers) — that part is in use although this object may not be.
  virtual int64_t unshared_bytes() const = 0;
};
using KvBlockRef = std::shared_ptr<const KvBlock>;

// What a block's bytes mean. Two backends may exchange blocks only when context_key matches:
// it covers the model fingerprint (architecture, shapes, types, tokenizer, sampled weight
// data), the KV dtype and layout and the rope settings, i.e. everything that changes the KV.
struct KvLayout {
  int32_t block_tokens = 16;
  int64_t block_bytes = 0;
  std::string dtype = "f16";  // kv_type_name of the backend's KvType
  uint64_t model_fingerprint = 0;
  uint64_t context_key = 0;  // root of the prefix cache's hash chain
};

// The KV state of one sequence. Created per request and destroyed with it (never reset field
// by field); its memory is returned when it is destroyed (blocks shared elsewhere live on).
//
// Sliding-window layers keep only their window: once a full block lies outside the window of
// every future query (its last position <= length() - sliding_window), the sequence drops its
// reference to the block's sliding-layer part and keeps only the global layers' part. It does
// so at the start of each forward, at its end for blocks that were already full before it, and
// at creation (new_sequence, fork_sequence) — never for a block that became full in the latest
// forward, so the caller can still take it whole with block() right after that forward.
class Sequence {
 public:
  virtual ~Sequence() = default;
  virtual int32_t length() const = 0;    // tokens already in the cache (next position)
  virtual int32_t capacity() const = 0;  // most tokens it can hold
  // Full block i (i < length() / block_tokens), whole and shared: it is never written again.
  // Valid for every block that became full in the latest forward() and any block still
  // within the window; a block whose sliding part was dropped cannot be handed out.
  virtual KvBlockRef block(int32_t i) const = 0;
  // Bytes of KV memory this sequence references (blocks it shares with others counted in
  // full): the memory one sequence of this length costs.
  virtual int64_t kv_bytes() const = 0;
};

struct ForwardItem {
  Sequence* seq = nullptr;
  std::span<const int32_t> tokens;  // appended at positions seq->length(), ... ; non-empty
  bool want_logits = true;          // logits of the last token of this item
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int32_t n_ctx() const = 0;  // context size in effect (LoadOptions::n_ctx resolved)
  virtual const KvLayout& kv_layout() const = 0;
  // capacity: the most tokens the sequence may hold (<= the context size). `prefix`: full
  // blocks (from this backend or kv_block_from_bytes) that become positions
  // [0, prefix.size() * block_tokens); the sequence starts at that length and shares them.
  virtual std::unique_ptr<Sequence> new_sequence(int32_t capacity,
                                                 std::span<const KvBlockRef> prefix = {}) = 0;
  // A block from bytes() of a block with the same kv_layout().context_key; Error on a size
  // mismatch. The caller vouches for the content (checksums, hash chain).
  virtual Result<KvBlockRef> kv_block_from_bytes(std::span<const uint8_t> bytes) = 0;
  // A new sequence holding the same KV as `src` (positions [0, src.length())), to continue
  // independently (n > 1 choices share one prefill): full blocks are shared, the partial last
  // block is copied. capacity >= src.length().
  virtual std::unique_ptr<Sequence> fork_sequence(const Sequence& src, int32_t capacity) = 0;
  // Runs all items as one batch: decode steps of many sequences and prefill chunks share one
  // pass over the weights. For each item with want_logits, in order, n_vocab floats are
  // written to `logits` (which must hold that many).
  virtual Status forward(std::span<const ForwardItem> items, std::span<float> logits) = 0;
  // Bytes of KV memory actually held: every live allocation of sequences' blocks and of those
  // shared elsewhere, each counted once (tests use it to prove nothing leaks).
  virtual int64_t live_kv_bytes() const = 0;
  // Waits for a background weight copy (LoadOptions::copy_weights_in_background) to finish or
  // fail; the next forward then uses the copies. Call from the thread that runs forward.
  virtual void settle_weights() {}
  // Bytes of weight matrices forwards read from huge-page copies (0: from the file mapping).
  virtual int64_t weight_copy_bytes() const { return 0; }
  // The compute pool's timing (tensor::ThreadPool::Timing), for `ember bench --pool-timing`:
  // set while no forward runs, read after forwards have returned.
  virtual void set_pool_timing(bool /*on*/) {}
  virtual tensor::ThreadPool::Timing pool_timing() const { return {}; }
};

// How the KV cache holds keys and values. f16 (IEEE half, llama.cpp's default cache type) halves
// the cache's memory and attention's reads; f32 keeps them as computed.
enum class KvType { F16, F32 };
std::string_view kv_type_name(KvType t);  // "f16", "f32": KvLayout::dtype
std::optional<KvType> kv_type_from_name(std::string_view name);

struct LoadOptions {
  int32_t n_threads = 0;  // 0: all cores
  int32_t n_ctx = 0;      // 0: min(n_ctx_train, 4096)
  // Copy the weight matrices out of the file mapping into huge-page memory (weights.h); off:
  // stream them from the mapping (zero-copy, 4 KiB pages).
  bool huge_page_weights = true;
  // With huge_page_weights: copy on a background thread instead of before load returns. The
  // backend is usable at once (forwards read the file mapping) and switches to the copies at
  // the start of the first forward after the copy is done, so a server is ready without
  // waiting for the copy (up to seconds on a VM whose fresh memory is slow to fault in).
  bool copy_weights_in_background = false;
  KvType kv_type = KvType::F16;
};

// Loads weights from the file (kept mapped; zero-copy). Errors: unknown architecture, a
// missing tensor, a shape or type mismatch, each naming the tensor.
Result<std::unique_ptr<Backend>> load_cpu_model(std::shared_ptr<const gguf::File> file,
                                                const LoadOptions& opts);
Result<ModelConfig> read_config(const gguf::File& file);

}  // namespace ember::model
