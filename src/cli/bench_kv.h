// `ember bench --kv-lengths`: KV bytes one sequence holds at given context lengths, next to
// what it held before sliding-window layers kept only their window (every layer's K and V for
// every position) and what llama.cpp's SWA cache allocates for the same model and context.
//
// Lengths up to --kv-measure-up-to are measured: one sequence is prefilled in 512-token
// chunks to one position short of the length, then takes one decode step (the state a
// generating sequence is in), and Sequence::kv_bytes() is read. Longer lengths are derived
// from a measured length r <= the cap with r = length (mod block size): past the window, the
// blocks a sequence keeps whole depend only on where its end falls, so going from r to L adds
// (L - r) / block_tokens blocks of global-layer bytes and nothing else. The derivation's
// premise is checked by measuring every length that fits.
#pragma once

#include <string>
#include <vector>

#include "model/backend.h"

namespace ember::cli {

struct KvBytesOptions {
  std::string model;
  int threads = 0;
  std::vector<int> lengths;  // context lengths to report
  int measure_up_to = 4096;  // the longest really prefilled
  model::KvType kv_type = model::KvType::F16;
  bool json = false;
};

int run_kv_bytes(const KvBytesOptions& o);

}  // namespace ember::cli
