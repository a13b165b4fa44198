#include "cli/bench_kv.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cli/model_path.h"
#include "model/backend.h"

namespace ember::cli {

namespace {

using json = nlohmann::json;

constexpr int32_t kChunk = 512;  // the engine's default prefill chunk

// llama.cpp (src/llama-kv-cache-iswa.cpp): global layers hold n_ctx cells; sliding layers
// GGML_PAD(min(n_ctx, n_swa + n_ubatch), 256) cells for one sequence (n_ubatch 512 by
// default), f16 K and V (its default cache type). A model without sliding layers: n_ctx cells
// in every layer.
struct LlamaCpp {
  int64_t cells_global = 0, cells_sliding = 0, bytes_f16 = 0, bytes_f32 = 0;
};
LlamaCpp llama_cpp_kv(const model::ModelConfig& c, int64_t n_ctx) {
  constexpr int64_t kUbatch = 512, kPad = 256;
  auto pad = [](int64_t n) { return (n + kPad - 1) / kPad * kPad; };
  LlamaCpp l;
  l.cells_global = pad(n_ctx);
  l.cells_sliding = pad(std::min<int64_t>(n_ctx, int64_t{c.sliding_window} + kUbatch));
  int64_t cells = 0;  // summed over layers
  for (int32_t il = 0; il < c.n_layer; ++il) {
    cells += c.is_sliding(il) ? l.cells_sliding : l.cells_global;
  }
  const int64_t per_cell = int64_t{2} * c.n_head_kv * c.head_dim;  // K and V elements
  l.bytes_f16 = cells * per_cell * 2;
  l.bytes_f32 = cells * per_cell * 4;
  return l;
}

std::vector<int32_t> filler(int32_t n, int32_t n_vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint32_t x = 0x2545F491u;
  for (auto& id : ids) {
    x = x * 1664525u + 1013904223u;
    id = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab));
  }
  return ids;
}

double mib(int64_t b) {
  return static_cast<double>(b) / (1 << 20);
}

}  // namespace

int run_kv_bytes(const KvBytesOptions& o) {
  auto fail_with = [](const std::string& m) {
    std::fprintf(stderr, "ember bench: %s\n", m.c_str());
    return 1;
  };
  auto path = resolve_model_path(o.model);
  if (!path) return fail_with(path.message());
  auto file = gguf::File::open(*path);
  if (!file) return fail_with(file.message());
  auto shared = std::make_shared<const gguf::File>(std::move(file).value());
  auto cfg = model::read_config(*shared);
  if (!cfg) return fail_with(cfg.message());
  const int32_t B = 16;
  // Which lengths to measure: those that fit, plus for each longer one a length <= the cap in
  // the same place within a block.
  std::map<int32_t, int32_t> source;  // length -> the measured length it comes from
  for (int L : o.lengths) {
    if (L < 2 || L > cfg->n_ctx_train) {
      return fail_with(fmt::format("--kv-lengths: {} is not in 2..{} (the model's context)", L,
                                   cfg->n_ctx_train));
    }
    int32_t r = L;
    if (L > o.measure_up_to) r = L - (L - o.measure_up_to + B - 1) / B * B;
    if (r < 2) return fail_with(fmt::format("--kv-measure-up-to {} is too short", o.measure_up_to));
    source[L] = r;
  }
  std::vector<int32_t> measure;
  for (const auto& [L, r] : source) measure.push_back(r);
  std::sort(measure.begin(), measure.end());
  measure.erase(std::unique(measure.begin(), measure.end()), measure.end());
  if (measure.empty()) return fail_with("--kv-lengths: no length given");

  model::LoadOptions lo;
  lo.n_threads = o.threads;
  lo.n_ctx = measure.back();
  lo.huge_page_weights = false;
  lo.kv_type = o.kv_type;
  auto backend = model::load_cpu_model(shared, lo);
  if (!backend) return fail_with(backend.message());
  model::Backend& b = **backend;
  if (b.kv_layout().block_tokens != B) return fail_with("unexpected KV block size");

  // One sequence walks through every measured length: chunks up to one short, then a step.
  std::map<int32_t, int64_t> measured;
  const auto toks = filler(measure.back(), cfg->n_vocab);
  auto seq = b.new_sequence(measure.back());
  std::vector<float> logits(static_cast<size_t>(cfg->n_vocab));
  int64_t peak = 0;  // the most held between two forwards
  for (int32_t target : measure) {
    while (seq->length() < target) {
      const int32_t left = target - 1 - seq->length();
      const int32_t n = left > 0 ? std::min(kChunk, left) : 1;
      model::ForwardItem it{
          seq.get(),
          std::span(toks).subspan(static_cast<size_t>(seq->length()), static_cast<size_t>(n)),
          true};
      Status st = b.forward(std::span(&it, 1), logits);
      if (!st.ok()) return fail_with(st.message());
      peak = std::max(peak, seq->kv_bytes());
    }
    measured[target] = seq->kv_bytes();
  }

  int64_t global_per_token = 0, sliding_per_token = 0;
  // One layer's K and V of one position, in the cache's type.
  const int64_t row = b.kv_layout().block_bytes / (int64_t{B} * cfg->n_layer);
  for (int32_t il = 0; il < cfg->n_layer; ++il) {
    (cfg->is_sliding(il) ? sliding_per_token : global_per_token) += row;
  }
  json out;
  out["model"] = *path;
  out["n_layer"] = cfg->n_layer;
  out["sliding_window"] = cfg->sliding_window;
  out["kv_dtype"] = b.kv_layout().dtype;
  out["bytes_per_position"] = {{"global_layers", global_per_token},
                               {"sliding_layers", sliding_per_token}};
  out["peak_between_forwards"] = {{"length", measure.back()}, {"bytes", peak}};
  json rows = json::array();
  for (const auto& [L, r] : source) {
    const int64_t blocks = (int64_t{L} + B - 1) / B;
    const int64_t now = measured[r] + (L - r) / B * B * global_per_token;
    const LlamaCpp l = llama_cpp_kv(*cfg, L);
    rows.push_back({{"length", L},
                    {"full_history_bytes", blocks * b.kv_layout().block_bytes},
                    {"bytes", now},
                    {"measured", L == r},
                    {"derived_from", r},
                    {"llama_cpp_cells_global", l.cells_global},
                    {"llama_cpp_cells_sliding", l.cells_sliding},
                    {"llama_cpp_f16_bytes", l.bytes_f16},
                    {"llama_cpp_f32_bytes", l.bytes_f32}});
  }
  out["lengths"] = rows;
  if (o.json) {
    std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  std::printf(
      "KV bytes per sequence, %s: %d layers, sliding window %d, %s; per position %lld B in the "
      "global layers, %lld B in the sliding layers\n",
      path->c_str(), cfg->n_layer, cfg->sliding_window, b.kv_layout().dtype.c_str(),
      static_cast<long long>(global_per_token), static_cast<long long>(sliding_per_token));
  std::printf("%8s %16s %16s %-22s %26s %18s\n", "length", "full history", "ember now", "",
              "llama.cpp f16 (cells g/s)", "llama.cpp as f32");
  for (const auto& r : rows) {
    const std::string how = r["measured"].get<bool>()
                                ? "measured"
                                : fmt::format("derived from {}", r["derived_from"].get<int>());
    std::printf("%8d %12.1f MiB %12.1f MiB %-22s %12.1f MiB (%lld/%lld) %14.1f MiB\n",
                r["length"].get<int>(), mib(r["full_history_bytes"].get<int64_t>()),
                mib(r["bytes"].get<int64_t>()), how.c_str(),
                mib(r["llama_cpp_f16_bytes"].get<int64_t>()),
                static_cast<long long>(r["llama_cpp_cells_global"].get<int64_t>()),
                static_cast<long long>(r["llama_cpp_cells_sliding"].get<int64_t>()),
                mib(r["llama_cpp_f32_bytes"].get<int64_t>()));
  }
  std::printf(
      "most held between two forwards while prefilling to %d in %d-token chunks: %.1f MiB\n",
      measure.back(), kChunk, mib(peak));
  return 0;
}

}  // namespace ember::cli
