// Weight binding: finds every tensor an architecture needs in a mapped GGUF file and checks its
// shape and type, so the forward pass can trust what it reads. Bound weights point into the
// mapping (the File must outlive the Weights); copy_weights_to_arena then moves every weight,
// matrices and norm vectors alike, into huge-page memory the Weights own
// (tensor/weight_arena.h), so that once a model runs from its copies nothing reads the mapping.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "gguf/reader.h"
#include "model/backend.h"
#include "tensor/matmul.h"
#include "tensor/weight_arena.h"

namespace ember::model {

struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd]
  tensor::Matrix wq;                      // [n_head * head_dim][n_embd]
  tensor::Matrix wk;                      // [n_head_kv * head_dim][n_embd]
  tensor::Matrix wv;                      // [n_head_kv * head_dim][n_embd]
  tensor::Matrix wo;                      // [n_embd][n_head * head_dim]
  const float* bq = nullptr;              // [n_head * head_dim] qwen2: added to q
  const float* bk = nullptr;              // [n_head_kv * head_dim] qwen2: added to k
  const float* bv = nullptr;              // [n_head_kv * head_dim] qwen2: added to v
  const float* q_norm = nullptr;          // [head_dim] qwen3, gemma3
  const float* k_norm = nullptr;          // [head_dim] qwen3, gemma3
  const float* post_attn_norm = nullptr;  // [n_embd] gemma3
  const float* ffn_norm = nullptr;        // [n_embd]
  tensor::Matrix w_gate;                  // [n_ff][n_embd]
  tensor::Matrix w_up;                    // [n_ff][n_embd]
  tensor::Matrix w_down;                  // [n_embd][n_ff]
  const float* post_ffn_norm = nullptr;   // [n_embd] gemma3
};

struct Weights {
  tensor::Matrix token_embd;           // [n_vocab][n_embd]
  const float* output_norm = nullptr;  // [n_embd]
  tensor::Matrix output;               // [n_vocab][n_embd] (token_embd when tied)
  const float* output_b = nullptr;     // [n_vocab] qwen2: added to the logits, or null
  const float* rope_freqs = nullptr;   // [rope_dim / 2] llama3 frequency factors, or null
  // [rope_dim / 2] phi3 LongRoPE factors, or null; load_cpu_model points rope_freqs at one.
  const float* rope_long = nullptr;
  const float* rope_short = nullptr;
  std::vector<LayerWeights> layers;            // [n_layer]
  std::shared_ptr<tensor::WeightArena> arena;  // holds the matrices once copied; else null
};

// The types a weight matrix may have (what the matmul kernels read), and their names in ggml's
// type order ("F32, F16, Q4_0, ..."), which unsupported-type errors list.
bool is_weight_type(tensor::DType t);
std::string supported_weight_type_names();

// Errors name the file and the tensor: missing, wrong shape (expected vs actual), or a type
// the kernels do not support.
Result<Weights> bind_weights(const gguf::File& f, const ModelConfig& c);

// Copies every matrix (a tied output once) and every norm vector (and rope_freqs) of w, bound
// for c, into one WeightArena owned by w, points the Weights at the copies and releases the
// mapped pages of the originals. The values are unchanged, so results are bit-identical.
// The vectors move too because a kernel may map a file's page cache in 2 MiB folios: a 2.5 KB
// norm that every forward reads from the mapping then keeps the whole 2 MiB around it in this
// process's RSS (Linux 6.18 on ext4: Gemma 3 270M's bench peak 323 MiB, 299 with the norms
// copied). False, and w untouched, when the arena cannot be mapped or `cancel` became true
// before the copy finished (checked between matrices).
bool copy_weights_to_arena(Weights* w, const ModelConfig& c,
                           const std::atomic<bool>* cancel = nullptr);

}  // namespace ember::model
