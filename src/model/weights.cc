// bind_weights: tensor names and shapes per architecture, as llama.cpp's GGUF files lay them out.
#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>

#include "tensor/interleave.h"

namespace ember::model {
namespace {

using tensor::DType;

}  // namespace

bool is_weight_type(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return true;
    default:
      return false;
  }
}

std::string supported_weight_type_names() {
  std::string out;
  for (uint32_t id = 0; id < 64; ++id) {
    auto t = tensor::dtype_from_gguf(id);
    if (t && is_weight_type(*t)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(*t));
  }
  return out;
}

namespace {

// Rows [r0, r0 + n) of m, a view into the same data: the parts of a fused matrix (phi3's
// attn_qkv and gate+up ffn_up), which the kernels then see as matrices of their own.
tensor::Matrix row_range(const tensor::Matrix& m, int64_t r0, int64_t n) {
  const auto* base = static_cast<const uint8_t*>(m.data);
  return tensor::Matrix{m.type, n, m.cols,
                        base + tensor::row_bytes(m.type, m.cols) * static_cast<size_t>(r0)};
}

class Binder {
 public:
  explicit Binder(const gguf::File& f) : f_(f) {}

  Result<const gguf::TensorInfo*> find(const std::string& name, std::vector<int64_t> dims,
                                       bool optional = false) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (optional) return static_cast<const gguf::TensorInfo*>(nullptr);
      return fail("{}: missing tensor '{}'", f_.path(), name);
    }
    if (t->dims != dims) {
      return fail("{}: tensor '{}' has shape [{}], expected [{}]", f_.path(), name,
                  fmt::join(t->dims, ", "), fmt::join(dims, ", "));
    }
    return t;
  }

  Result<const float*> vec(const std::string& name, int64_t n, bool optional = false) {
    EMBER_TRY(const gguf::TensorInfo* t, find(name, {n}, optional));
    if (!t) return static_cast<const float*>(nullptr);
    if (t->type != DType::F32) {
      return fail("{}: tensor '{}' has type {}, expected F32", f_.path(), name,
                  tensor::dtype_name(t->type));
    }
    // The reader aligns tensor data to general.alignment (>= 4 in practice); check anyway.
    if (reinterpret_cast<uintptr_t>(t->data) % alignof(float) != 0) {
      return fail("{}: tensor '{}' data is not 4-byte aligned", f_.path(), name);
    }
    return reinterpret_cast<const float*>(t->data);
  }

  // A weight matrix of shape [rows][cols] (GGUF dims {cols, rows}).
  Result<tensor::Matrix> mat(const std::string& name, int64_t cols, int64_t rows,
                             bool optional = false) {
    EMBER_TRY(const gguf::TensorInfo* t, find(name, {cols, rows}, optional));
    if (!t) return tensor::Matrix{};
    if (!is_weight_type(t->type)) {
      return fail("{}: tensor '{}' has type {}, which is not supported for weights (supported: {})",
                  f_.path(), name, tensor::dtype_name(t->type), supported_weight_type_names());
    }
    if (cols % tensor::block_elems(t->type) != 0) {
      return fail("{}: tensor '{}' has {} columns, not a multiple of the {} block size {}",
                  f_.path(), name, cols, tensor::dtype_name(t->type), tensor::block_elems(t->type));
    }
    return tensor::Matrix{t->type, rows, cols, t->data};
  }

 private:
  const gguf::File& f_;
};

}  // namespace

Result<Weights> bind_weights(const gguf::File& f, const ModelConfig& c) {
  Binder b(f);
  Weights w;
  const int64_t q_dim = int64_t{c.n_head} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_head_kv} * c.head_dim;
  EMBER_TRY(w.token_embd, b.mat("token_embd.weight", c.n_embd, c.n_vocab));
  EMBER_TRY(w.output_norm, b.vec("output_norm.weight", c.n_embd));
  // gemma2's output projection is always the token embeddings (llama.cpp ignores an
  // output.weight there; read_config reports such a file as tied).
  if (c.arch != Arch::Gemma2) {
    EMBER_TRY(w.output, b.mat("output.weight", c.n_embd, c.n_vocab, /*optional=*/true));
    EMBER_TRY(w.output_b, b.vec("output.bias", c.n_vocab, /*optional=*/true));
  }
  if (!w.output.data) w.output = w.token_embd;
  if (c.arch == Arch::Llama) {
    EMBER_TRY(w.rope_freqs, b.vec("rope_freqs.weight", c.rope_dim / 2, /*optional=*/true));
  }
  const bool phi3 = c.arch == Arch::Phi3;
  if (phi3) {
    EMBER_TRY(w.rope_long, b.vec("rope_factors_long.weight", c.rope_dim / 2, /*optional=*/true));
    EMBER_TRY(w.rope_short, b.vec("rope_factors_short.weight", c.rope_dim / 2, /*optional=*/true));
  }
  const bool qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Gemma3;
  const bool post_norms = c.arch == Arch::Gemma2 || c.arch == Arch::Gemma3;
  w.layers.resize(c.n_layer);
  for (int il = 0; il < c.n_layer; ++il) {
    LayerWeights& l = w.layers[il];
    const std::string p = fmt::format("blk.{}.", il);
    EMBER_TRY(l.attn_norm, b.vec(p + "attn_norm.weight", c.n_embd));
    if (phi3 && f.find_tensor(p + "attn_qkv.weight") != nullptr) {
      // Q, K and V in one matrix, in that order (llama.cpp's split of attn_qkv).
      EMBER_TRY(tensor::Matrix qkv, b.mat(p + "attn_qkv.weight", c.n_embd, q_dim + 2 * kv_dim));
      l.wq = row_range(qkv, 0, q_dim);
      l.wk = row_range(qkv, q_dim, kv_dim);
      l.wv = row_range(qkv, q_dim + kv_dim, kv_dim);
    } else {
      EMBER_TRY(l.wq, b.mat(p + "attn_q.weight", c.n_embd, q_dim));
      EMBER_TRY(l.wk, b.mat(p + "attn_k.weight", c.n_embd, kv_dim));
      EMBER_TRY(l.wv, b.mat(p + "attn_v.weight", c.n_embd, kv_dim));
    }
    EMBER_TRY(l.wo, b.mat(p + "attn_output.weight", q_dim, c.n_embd));
    // Optional for every architecture, as llama.cpp binds them; Qwen2 files have all three.
    EMBER_TRY(l.bq, b.vec(p + "attn_q.bias", q_dim, /*optional=*/true));
    EMBER_TRY(l.bk, b.vec(p + "attn_k.bias", kv_dim, /*optional=*/true));
    EMBER_TRY(l.bv, b.vec(p + "attn_v.bias", kv_dim, /*optional=*/true));
    if (qk_norm) {
      EMBER_TRY(l.q_norm, b.vec(p + "attn_q_norm.weight", c.head_dim));
      EMBER_TRY(l.k_norm, b.vec(p + "attn_k_norm.weight", c.head_dim));
    }
    if (post_norms) {
      EMBER_TRY(l.post_attn_norm, b.vec(p + "post_attention_norm.weight", c.n_embd));
      EMBER_TRY(l.post_ffn_norm, b.vec(p + "post_ffw_norm.weight", c.n_embd));
    }
    EMBER_TRY(l.ffn_norm, b.vec(p + "ffn_norm.weight", c.n_embd));
    if (phi3) {
      // Gate and up in one matrix, gate first (llama.cpp's SwiGLU over the halves of ffn_up).
      EMBER_TRY(tensor::Matrix up, b.mat(p + "ffn_up.weight", c.n_embd, 2 * int64_t{c.n_ff}));
      l.w_gate = row_range(up, 0, c.n_ff);
      l.w_up = row_range(up, c.n_ff, c.n_ff);
    } else {
      EMBER_TRY(l.w_gate, b.mat(p + "ffn_gate.weight", c.n_embd, c.n_ff));
      EMBER_TRY(l.w_up, b.mat(p + "ffn_up.weight", c.n_embd, c.n_ff));
    }
    EMBER_TRY(l.w_down, b.mat(p + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  return w;
}

namespace {

template <class F>
void for_each_matrix(Weights* w, F&& f) {
  f(w->token_embd);
  f(w->output);
  for (auto& l : w->layers) {
    for (tensor::Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) f(*m);
  }
}

// Every vector bind_weights binds, with the length it checked: f(pointer, floats) for each that
// the model has (the optional ones are null otherwise).
template <class F>
void for_each_vector(Weights* w, const ModelConfig& c, F&& f) {
  f(w->output_norm, c.n_embd);
  f(w->rope_freqs, c.rope_dim / 2);
  f(w->rope_long, c.rope_dim / 2);
  f(w->rope_short, c.rope_dim / 2);
  f(w->output_b, c.n_vocab);
  for (auto& l : w->layers) {
    f(l.bq, int64_t{c.n_head} * c.head_dim);
    f(l.bk, int64_t{c.n_head_kv} * c.head_dim);
    f(l.bv, int64_t{c.n_head_kv} * c.head_dim);
    for (const float** v : {&l.attn_norm, &l.post_attn_norm, &l.ffn_norm, &l.post_ffn_norm}) {
      f(*v, c.n_embd);
    }
    f(l.q_norm, c.head_dim);
    f(l.k_norm, c.head_dim);
  }
}

size_t matrix_bytes(const tensor::Matrix& m) {
  return tensor::row_bytes(m.type, m.cols) * static_cast<size_t>(m.rows);
}

}  // namespace

bool copy_weights_to_arena(Weights* w, const ModelConfig& c, const std::atomic<bool>* cancel) {
  size_t total = 0;
  const void* tied = w->output.data == w->token_embd.data ? w->output.data : nullptr;
  for_each_matrix(w, [&](const tensor::Matrix& m) {
    if (m.data != nullptr && !(m.data == tied && &m == &w->output)) total += matrix_bytes(m) + 64;
  });
  for_each_vector(w, c, [&](const float* v, int64_t n) {
    if (v != nullptr) total += static_cast<size_t>(n) * sizeof(float) + 64;
  });
  auto arena = tensor::WeightArena::create(total);
  if (!arena) return false;
  struct Moved {
    const void* from;
    const uint8_t* to;
    int32_t interleave;
  };
  std::vector<Moved> moved;
  Weights copy = *w;
  bool cancelled = false;
  for_each_matrix(&copy, [&](tensor::Matrix& m) {
    if (m.data == nullptr || cancelled) return;
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      cancelled = true;
      return;
    }
    for (const Moved& mv : moved) {
      if (mv.from == m.data) {
        m.data = mv.to;
        m.interleave = mv.interleave;
        return;
      }
    }
    const size_t n = matrix_bytes(m);
    // In the layout the active level computes fastest with (the same bits, permuted: the
    // kernels give the same results either way); source pages released as each chunk is done.
    const int32_t lanes = tensor::preferred_interleave(m.type, m.rows, m.cols);
    const uint8_t* to = nullptr;
    if (lanes > 0) {
      uint8_t* dst = arena->take(n);
      EMBER_ASSERT(dst != nullptr);  // sized above
      tensor::interleave_matrix(m.type, m.rows, m.cols, lanes, m.data, dst,
                                /*release_source=*/true);
      to = dst;
    } else {
      to = arena->add(m.data, n, /*release_source=*/true);
    }
    EMBER_ASSERT(to != nullptr);  // sized above
    moved.push_back({m.data, to, lanes});
    m.data = to;
    m.interleave = lanes;
  });
  if (cancelled) return false;
  for_each_vector(&copy, c, [&](const float*& v, int64_t n) {
    if (v == nullptr) return;
    const uint8_t* to = arena->add(v, static_cast<size_t>(n) * sizeof(float));
    EMBER_ASSERT(to != nullptr);  // sized above
    v = reinterpret_cast<const float*>(to);
  });
  copy.arena = std::move(arena);
  *w = std::move(copy);
  return true;
}

}  // namespace ember::model
