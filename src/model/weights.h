// Weight binding: finds every tensor an architecture needs in a mapped GGUF file and checks its
// shape and type, so the forward pass can trust what it reads. Matrices stay in the mapping
// (zero-copy); the File must outlive the Weights.
#pragma once

#include <vector>

#include "base/result.h"
#include "gguf/reader.h"
#include "model/backend.h"
#include "tensor/matmul.h"

namespace ember::model {

struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd]
  tensor::Matrix wq;                      // [n_head * head_dim][n_embd]
  tensor::Matrix wk;                      // [n_head_kv * head_dim][n_embd]
  tensor::Matrix wv;                      // [n_head_kv * head_dim][n_embd]
  tensor::Matrix wo;                      // [n_embd][n_head * head_dim]
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
  const float* rope_freqs = nullptr;   // [rope_dim / 2] llama3 frequency factors, or null
  std::vector<LayerWeights> layers;    // [n_layer]
};

// Errors name the file and the tensor: missing, wrong shape (expected vs actual), or a type
// the kernels do not support.
Result<Weights> bind_weights(const gguf::File& f, const ModelConfig& c);

}  // namespace ember::model
