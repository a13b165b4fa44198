// read_config: the hyperparameters of a GGUF model, with llama.cpp's defaults and the
// architecture rules llama.cpp hard-codes (gemma3's sliding-window pattern and attention scale).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "model/backend.h"

namespace ember::model {
namespace {

Result<int32_t> get_pos_int(const gguf::File& f, const std::string& key) {
  EMBER_TRY(int64_t v, f.get_int(key));
  if (v <= 0 || v > (1 << 30))
    return fail("{}: metadata '{}' = {} is out of range", f.path(), key, v);
  return static_cast<int32_t>(v);
}

Result<int32_t> get_pos_int_or(const gguf::File& f, const std::string& key, int32_t def) {
  if (!f.find(key)) return def;
  return get_pos_int(f, key);
}

// Which layers use the sliding window, from {arch}.attention.sliding_window_pattern as
// llama.cpp reads it: an array of one flag per layer, or a period n (default: gemma3 6, gemma2
// 2) where layer il is windowed when il % n < n - 1 (every n-th layer is global; n = 0: every layer
// windowed).
Result<std::vector<uint8_t>> sliding_layers(const gguf::File& f, const std::string& a,
                                            int32_t n_layer, int64_t default_period) {
  const std::string key = a + "attention.sliding_window_pattern";
  std::vector<uint8_t> out(static_cast<size_t>(n_layer), 0);
  const gguf::Value* v = f.find(key);
  if (v && v->type == gguf::ValueType::ARRAY) {
    if (v->size() != out.size()) {
      return fail("{}: {} has {} entries, but the model has {} layers", f.path(), key, v->size(),
                  n_layer);
    }
    for (size_t il = 0; il < out.size(); ++il) {
      const gguf::Value e = v->at(il);
      if (e.type != gguf::ValueType::BOOL && !e.is_integer()) {
        return fail("{}: {}[{}] is {}, expected a bool", f.path(), key, il,
                    gguf::value_type_name(e.type));
      }
      out[il] = (e.u != 0 || e.i != 0) ? 1 : 0;
    }
    return out;
  }
  EMBER_TRY(int64_t period, f.get_int_or(key, default_period));
  if (period < 0 || period > INT32_MAX) {
    return fail("{}: {} is {}; expected a layer period >= 0", f.path(), key, period);
  }
  for (int32_t il = 0; il < n_layer; ++il) {
    out[static_cast<size_t>(il)] = period == 0 || il % period < period - 1 ? 1 : 0;
  }
  return out;
}

struct ArchName {
  Arch arch;
  std::string_view name;
};
constexpr ArchName kArchNames[] = {{Arch::Llama, "llama"},   {Arch::Qwen2, "qwen2"},
                                   {Arch::Qwen3, "qwen3"},   {Arch::Gemma2, "gemma2"},
                                   {Arch::Gemma3, "gemma3"}, {Arch::Phi3, "phi3"}};

}  // namespace

std::optional<Arch> arch_from_name(std::string_view name) {
  for (const ArchName& a : kArchNames) {
    if (a.name == name) return a.arch;
  }
  return std::nullopt;
}

std::string supported_arch_names() {
  std::string out;
  for (const ArchName& a : kArchNames) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

Result<ModelConfig> read_config(const gguf::File& f) {
  ModelConfig c;
  EMBER_TRY(c.arch_name, f.get_string("general.architecture"));
  const std::optional<Arch> arch = arch_from_name(c.arch_name);
  if (!arch) {
    return fail("{}: architecture '{}' is not supported (supported: {})", f.path(), c.arch_name,
                supported_arch_names());
  }
  c.arch = *arch;
  EMBER_TRY(c.name, f.get_string_or("general.name", ""));
  const std::string a = c.arch_name + ".";

  EMBER_TRY(c.n_embd, get_pos_int(f, a + "embedding_length"));
  EMBER_TRY(c.n_layer, get_pos_int(f, a + "block_count"));
  EMBER_TRY(c.n_ff, get_pos_int(f, a + "feed_forward_length"));
  EMBER_TRY(c.n_head, get_pos_int(f, a + "attention.head_count"));
  EMBER_TRY(c.n_head_kv, get_pos_int_or(f, a + "attention.head_count_kv", c.n_head));
  EMBER_TRY(c.n_ctx_train, get_pos_int_or(f, a + "context_length", 2048));
  if (c.n_head % c.n_head_kv != 0) {
    return fail("{}: head_count {} is not a multiple of head_count_kv {}", f.path(), c.n_head,
                c.n_head_kv);
  }
  EMBER_TRY(c.head_dim, get_pos_int_or(f, a + "attention.key_length", c.n_embd / c.n_head));
  EMBER_TRY(int32_t v_len, get_pos_int_or(f, a + "attention.value_length", c.head_dim));
  if (v_len != c.head_dim) {
    return fail("{}: attention.value_length {} differs from key_length {} (unsupported)", f.path(),
                v_len, c.head_dim);
  }
  if (c.head_dim % 2 != 0) return fail("{}: head dimension {} is odd", f.path(), c.head_dim);
  EMBER_TRY(c.rope_dim, get_pos_int_or(f, a + "rope.dimension_count", c.head_dim));
  if (c.rope_dim > c.head_dim || c.rope_dim % 2 != 0) {
    return fail("{}: rope.dimension_count {} does not fit head dimension {}", f.path(), c.rope_dim,
                c.head_dim);
  }

  EMBER_TRY(double eps, f.get_float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.norm_eps = static_cast<float>(eps);
  EMBER_TRY(double base, f.get_float_or(a + "rope.freq_base", 10000.0));
  c.rope_base = static_cast<float>(base);
  c.rope_base_local = c.rope_base;
  EMBER_TRY(std::string scaling, f.get_string_or(a + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    EMBER_TRY(double factor, f.get_float_or(a + "rope.scaling.factor", 1.0));
    if (factor <= 0) return fail("{}: rope.scaling.factor {} must be positive", f.path(), factor);
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && !(c.arch == Arch::Llama && scaling == "llama3") &&
             !(c.arch == Arch::Phi3 && scaling == "longrope")) {
    return fail("{}: rope.scaling.type '{}' is not supported", f.path(), scaling);
  }
  if (c.arch == Arch::Phi3) {
    // LongRoPE as llama.cpp applies it: the factor tensors (weights.cc) divide the frequencies,
    // the long ones above the original context length; rope.scaling.attn_factor (default 1)
    // scales cos and sin. A Phi sliding window is ignored, as llama.cpp ignores it.
    EMBER_TRY(c.n_ctx_orig,
              get_pos_int_or(f, a + "rope.scaling.original_context_length", c.n_ctx_train));
    EMBER_TRY(double attn_factor, f.get_float_or(a + "rope.scaling.attn_factor", 1.0));
    if (!(attn_factor > 0)) {
      return fail("{}: {}rope.scaling.attn_factor {} must be positive", f.path(), a, attn_factor);
    }
    c.rope_attn_factor = static_cast<float>(attn_factor);
  }
  // gemma2 caps its logits and its attention scores, by default at 30 and 50 (llama.cpp's
  // defaults, the values every Gemma 2 file carries).
  const bool gemma2 = c.arch == Arch::Gemma2;
  EMBER_TRY(double softcap, f.get_float_or(a + "final_logit_softcapping", gemma2 ? 30.0 : 0.0));
  EMBER_TRY(double attn_softcap, f.get_float_or(a + "attn_logit_softcapping", gemma2 ? 50.0 : 0.0));
  if (!(softcap >= 0) || !(attn_softcap >= 0)) {
    return fail("{}: {}final_logit_softcapping {} and attn_logit_softcapping {} must be >= 0",
                f.path(), a, softcap, attn_softcap);
  }
  c.final_logit_softcap = static_cast<float>(softcap);
  // Only gemma2's graph caps attention scores; the key is ignored elsewhere, as llama.cpp does.
  c.attn_logit_softcap = gemma2 ? static_cast<float>(attn_softcap) : 0.f;
  EMBER_TRY(double scale, f.get_float_or(a + "attention.scale", 0.0));
  c.attn_scale = static_cast<float>(scale);

  c.rope_neox = c.arch != Arch::Llama;
  if (c.arch == Arch::Gemma3 || gemma2) {
    // As llama.cpp reads them. gemma3: sliding-window layers use rope.freq_base_swa (default
    // 10000) and no rope scaling, the window applies only where the key is given, every 6th
    // layer is global. gemma2: the window defaults to 4096, every other layer is global, and
    // the sliding layers share the global rope settings. The query scale is 1/sqrt(head_dim),
    // except for the 27B models (gemma3 62 layers, gemma2 46), whose query_pre_attn_scalar is
    // n_embd / n_head.
    if (gemma2 && c.rope_freq_scale != 1.f) {
      return fail("{}: rope.scaling.type '{}' is not supported for gemma2", f.path(), scaling);
    }
    EMBER_TRY(double base_swa, f.get_float_or(a + "rope.freq_base_swa", gemma2 ? base : 10000.0));
    if (!(base_swa > 0)) {
      return fail("{}: {}rope.freq_base_swa {} must be positive", f.path(), a, base_swa);
    }
    c.rope_base_local = static_cast<float>(base_swa);
    EMBER_TRY(c.sliding_window,
              get_pos_int_or(f, a + "attention.sliding_window", gemma2 ? 4096 : 0));
    if (c.sliding_window > 0) {
      EMBER_TRY(c.sliding_layers, sliding_layers(f, a, c.n_layer, gemma2 ? 2 : 6));
    }
    if (c.attn_scale == 0.f) {
      const bool big = c.n_layer == (gemma2 ? 46 : 62);
      const float d =
          big ? static_cast<float>(c.n_embd / c.n_head) : static_cast<float>(c.head_dim);
      c.attn_scale = 1.f / std::sqrt(d);
    }
  }

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (!embd) return fail("{}: missing tensor 'token_embd.weight'", f.path());
  if (embd->dims.size() != 2) {
    return fail("{}: tensor 'token_embd.weight' has {} dims, expected 2", f.path(),
                embd->dims.size());
  }
  c.n_vocab = static_cast<int32_t>(embd->dims[1]);
  c.tied_output = gemma2 || f.find_tensor("output.weight") == nullptr;
  c.has_rope_freqs = f.find_tensor("rope_freqs.weight") != nullptr;
  return c;
}

}  // namespace ember::model
