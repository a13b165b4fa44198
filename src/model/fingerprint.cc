#include "model/fingerprint.h"

#include <xxhash.h>

#include <algorithm>
#include <string_view>

namespace ember::model {
namespace {

class Hasher {
 public:
  Hasher() : st_(XXH3_createState()) { XXH3_64bits_reset(st_); }
  ~Hasher() { XXH3_freeState(st_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void bytes(const void* p, size_t n) { XXH3_64bits_update(st_, p, n); }
  template <typename T>
  void pod(const T& v) {
    bytes(&v, sizeof(v));
  }
  void str(std::string_view s) {
    pod(static_cast<uint64_t>(s.size()));
    bytes(s.data(), s.size());
  }
  uint64_t digest() const { return XXH3_64bits_digest(st_); }

 private:
  XXH3_state_t* st_;
};

void hash_value(Hasher& h, const gguf::Value& v) {
  h.pod(static_cast<uint32_t>(v.type));
  h.pod(static_cast<uint32_t>(v.elem_type));
  h.pod(v.u);
  h.pod(v.i);
  h.pod(v.f);
  h.str(v.s);
  h.pod(static_cast<uint64_t>(v.size()));
  for (size_t k = 0; k < v.size(); ++k) hash_value(h, v.at(k));
}

void hash_config(Hasher& h, const ModelConfig& c) {
  h.str(c.arch_name);
  for (int32_t x : {c.n_vocab, c.n_embd, c.n_layer, c.n_head, c.n_head_kv, c.head_dim, c.n_ff,
                    c.sliding_window, c.rope_dim}) {
    h.pod(x);
  }
  h.pod(static_cast<uint64_t>(c.sliding_layers.size()));
  h.bytes(c.sliding_layers.data(), c.sliding_layers.size());
  for (float x : {c.norm_eps, c.rope_base, c.rope_base_local, c.attn_scale, c.rope_freq_scale,
                  c.final_logit_softcap}) {
    h.pod(x);
  }
  h.pod(static_cast<uint8_t>(c.rope_neox));
  h.pod(static_cast<uint8_t>(c.has_rope_freqs));
  h.pod(static_cast<uint8_t>(c.tied_output));
  // phi3: which LongRoPE factors the context size chose (a cache made under one is not valid
  // under the other).
  if (c.arch == Arch::Phi3) h.pod(static_cast<uint8_t>(c.rope_long_factors));
}

}  // namespace

uint64_t model_fingerprint(const gguf::File& file, const ModelConfig& cfg) {
  constexpr size_t kWindow = 4096;
  Hasher h;
  h.str("ember-model-fingerprint-1");
  hash_config(h, cfg);
  for (const auto& [key, value] : file.metadata()) {
    h.str(key);
    hash_value(h, value);
  }
  for (const gguf::TensorInfo& t : file.tensors()) {
    h.str(t.name);
    h.pod(static_cast<uint32_t>(t.type));
    for (int64_t d : t.dims) h.pod(d);
    h.pod(static_cast<uint64_t>(t.nbytes));
    if (t.nbytes <= 3 * kWindow) {
      h.bytes(t.data, t.nbytes);
    } else {
      h.bytes(t.data, kWindow);
      h.bytes(t.data + (t.nbytes / 2 - kWindow / 2), kWindow);
      h.bytes(t.data + (t.nbytes - kWindow), kWindow);
    }
  }
  // The weights run from copies (model/weights.h), and each window's fault mapped more than the
  // window (fault-around; where the page cache comes in 2 MiB folios, 2 MiB): Gemma 3 270M's
  // 236 tensors kept 68 MB of its file in RSS after the copy had released the rest.
  file.release_tensor_data();
  return h.digest();
}

uint64_t kv_context_key(const KvLayout& layout, const ModelConfig& cfg) {
  Hasher h;
  h.str("ember-kv-context-2");  // bump when the KV computation or layout changes
  h.pod(layout.model_fingerprint);
  h.str(layout.dtype);
  h.pod(layout.block_tokens);
  h.pod(layout.block_bytes);
  hash_config(h, cfg);  // rope base, scaling and dimensions among them
  return h.digest();
}

uint64_t kv_block_checksum(const KvBlock& block) {
  Hasher h;
  for (std::span<const uint8_t> piece : block.bytes()) h.bytes(piece.data(), piece.size());
  return h.digest();
}

}  // namespace ember::model
