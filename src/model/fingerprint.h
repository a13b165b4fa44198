// Fingerprints that decide whether saved KV may be reused: model_fingerprint() identifies the
// model (every metadata key and value, so architecture, shapes, tokenizer and chat template;
// every tensor's name, type and shape; and a sample of each tensor's bytes), kv_context_key()
// adds the KV dtype, block layout and rope settings. Any difference gives another key (up to
// 64-bit hash collisions), so blocks from another model or layout are never mistaken for ours.
//
// Weight data is sampled, not hashed whole: per tensor its byte size plus three 4 KiB windows
// (start, middle, end; small tensors whole). A different file, quantization or fine-tune
// changes nearly every tensor, so a sample catches it, and the cost is O(tensors) rather than
// O(bytes): a multi-GB model would otherwise be read from disk before /ready just to hash it.
#pragma once

#include <cstdint>

#include "gguf/reader.h"
#include "model/backend.h"

namespace ember::model {

uint64_t model_fingerprint(const gguf::File& file, const ModelConfig& cfg);
uint64_t kv_context_key(const KvLayout& layout, const ModelConfig& cfg);
// XXH3-64 of a block's bytes as one span, whatever pieces the backend keeps them in (the
// warm-state file's per-block checksum).
uint64_t kv_block_checksum(const KvBlock& block);

}  // namespace ember::model
