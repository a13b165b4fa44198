// Matmul throughput per weight type, in weight bytes streamed per second (GB/s), at a decode
// shape (n_tokens = 1: memory-bound), a batched-decode shape (8: weights from memory, each row
// used 8 times), 16 and 32 (where avx512-amx's tile products take over) and a prefill shape
// (n_tokens = 64: compute-bound), on
// generic shapes and on the shapes of the default model (Gemma 3 270M Q4_K_M).
// Also decode attention at a 4,096-token context in four KV layouts (attention_decode_4096/*)
// and at 256 tokens in the cache's (attention_decode_256/head_major),
// the FFN activations at the models' widths (activation/*), greedy decoding's argmax over the
// models' vocabularies (argmax/*), and one SmolLM2 decode step's
// chain of matmuls through the pool, from memory (decode_chain/*).
// Run: [EMBER_SIMD_LEVEL=avx2|avx512-vnni|...] build/kernels_bench [--benchmark_filter=Q4_K]
//      [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
// Rates (bytes_per_second = weight bytes, tok/s) are per wall-clock second; on a shared machine
// divide the weight bytes by the CPU column instead (CPU time of the calling thread, which with
// a pool runs chunks or waits for the others the whole time).
#include <benchmark/benchmark.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tensor/activation.h"
#include "tensor/argmax.h"
#include "tensor/attention.h"
#include "tensor/interleave.h"
#include "tensor/matmul.h"
#include "tensor/quant.h"
#include "tensor/weight_arena.h"

namespace {

using ember::tensor::DType;

// A rows x cols matrix of type t with random weights, in the layout the engine copies it into
// (interleaved where the level's kernels read that; *lanes says which).
std::vector<uint8_t> weight_bytes(DType t, int64_t rows, int64_t cols, int32_t* lanes) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  // Quantize a few distinct random rows and repeat them: the output projection (262144 rows)
  // would otherwise need a 670 MB float buffer and minutes of quantization.
  constexpr int64_t kDistinct = 64;
  std::vector<float> w(static_cast<size_t>(kDistinct * cols));
  for (auto& v : w) v = dist(rng);
  const size_t rb = ember::tensor::row_bytes(t, cols);
  std::vector<uint8_t> distinct(rb * kDistinct);
  for (int64_t r = 0; r < kDistinct; ++r) {
    ember::tensor::quantize_row(t, w.data() + r * cols, distinct.data() + r * rb, cols);
  }
  std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(distinct.data() + (r % kDistinct) * rb, rb, q.data() + r * rb);
  }
  *lanes = ember::tensor::preferred_interleave(t, rows, cols);
  if (*lanes > 0) {
    std::vector<uint8_t> inter(q.size());
    ember::tensor::interleave_matrix(t, rows, cols, *lanes, q.data(), inter.data(), false);
    q.swap(inter);
  }
  return q;
}

void bm_matmul(benchmark::State& state, DType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  const int threads = static_cast<int>(state.range(0));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  int32_t lanes = 0;
  const std::vector<uint8_t> q = weight_bytes(t, rows, cols, &lanes);
  std::vector<float> x(static_cast<size_t>(n_tokens * cols));
  for (auto& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  // In 2 MiB pages, as the engine holds its weights (tensor/weight_arena.h): with 4 KiB pages a
  // matrix larger than the TLB's reach pays a nested page walk per 4 KiB under a hypervisor, and
  // how many of those a kernel overlaps depends on its access pattern, not only its arithmetic.
  auto arena = ember::tensor::WeightArena::create(q.size());
  const uint8_t* wdata = arena ? arena->add(q.data(), q.size()) : nullptr;
  if (wdata == nullptr) {
    state.SetLabel("4 KiB pages: no huge-page arena");  // figures not comparable to the engine's
    wdata = q.data();
  }
  ember::tensor::ThreadPool pool(threads);
  const ember::tensor::Matrix m{t, rows, cols, wdata, lanes};
  for (auto _ : state) {
    ember::tensor::matmul(m, x.data(), n_tokens, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(q.size()));
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens),
                                               benchmark::Counter::kIsRate);
}

// Decode attention by KV memory layout: SmolLM2's shape (3 KV heads of 64, 3 queries each, f16
// K/V), n_pos positions, 30 layers of distinct memory (at 4,096 positions 94 MB: from DRAM, as
// in decode), read as the backend reads it (chunks of 256 positions, KV heads inner, one
// thread). Layouts: "blocks" (16-position blocks, each [layer][K|V][16][heads x 64]: heads
// interleaved in a row, ember's cache before 1babb1e); "head_major" the same blocks as
// [layer][K|V][head][16][64] (the cache's layout now);
// "per_layer" llama.cpp's ([layer][K|V][position][heads x 64]); "per_head" one run per head
// ([layer][K|V][head][position][64]). The rate is K and V bytes read per second.
enum class KvLayoutKind { kBlocks, kHeadMajor, kPerLayer, kPerHead };

void bm_attention_layout(benchmark::State& state, KvLayoutKind kind, int32_t n_pos) {
  constexpr int32_t kLayers = 30, kHeads = 3, kGroup = 3, kHd = 64, kB = 16;
  const int32_t chunk = std::min(256, n_pos);
  constexpr int32_t kDim = kHeads * kHd;
  const size_t layer_elems = size_t{2} * n_pos * kDim;  // K and V of one layer
  std::vector<uint16_t> kv(layer_elems * kLayers, ember::tensor::f32_to_fp16(0.01f));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (auto& x : kv) x = ember::tensor::f32_to_fp16(d(rng));
  std::vector<float> q(size_t{kHeads} * kGroup * kHd), out(q.size()), scores(chunk * kGroup);
  for (auto& x : q) x = d(rng);
  float stats[2 * kGroup];
  // Element offset of (layer, K or V, head, position), and the row stride within a run.
  auto at = [&](int32_t l, int32_t v, int32_t h, int32_t p) -> size_t {
    switch (kind) {
      case KvLayoutKind::kBlocks:
        return ((size_t(p / kB) * kLayers + l) * 2 + v) * kB * kDim + size_t(p % kB) * kDim +
               size_t(h) * kHd;
      case KvLayoutKind::kHeadMajor:
        return (((size_t(p / kB) * kLayers + l) * 2 + v) * kHeads + h) * kB * kHd +
               size_t(p % kB) * kHd;
      case KvLayoutKind::kPerLayer:
        return (size_t(l) * 2 + v) * n_pos * kDim + size_t(p) * kDim + size_t(h) * kHd;
      case KvLayoutKind::kPerHead:
        break;
    }
    return ((size_t(l) * 2 + v) * kHeads + h) * n_pos * kHd + size_t(p) * kHd;
  };
  const int64_t stride =
      kind == KvLayoutKind::kBlocks || kind == KvLayoutKind::kPerLayer ? kDim : kHd;
  std::vector<ember::tensor::KvSegmentF16> segs;
  for (auto _ : state) {
    for (int32_t l = 0; l < kLayers; ++l) {
      for (int32_t c = 0; c < n_pos / chunk; ++c) {
        for (int32_t h = 0; h < kHeads; ++h) {
          segs.clear();
          const bool blocked = kind == KvLayoutKind::kBlocks || kind == KvLayoutKind::kHeadMajor;
          const int32_t run = blocked ? kB : chunk;
          for (int32_t p = c * chunk; p < (c + 1) * chunk; p += run) {
            segs.push_back({kv.data() + at(l, 0, h, p), kv.data() + at(l, 1, h, p), run});
          }
          ember::tensor::attend_group_segments(q.data() + h * kGroup * kHd, kHd, kGroup,
                                               segs.data(), static_cast<int32_t>(segs.size()),
                                               stride, chunk, kHd, 0.125f, scores.data(),
                                               out.data() + h * kGroup * kHd, kHd, stats);
        }
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(kv.size() * 2));
}

// gate = act(gate) * up over one token's FFN width: cache-resident, as at decode.
void bm_activation(benchmark::State& state, bool silu, int64_t n) {
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.f, 2.f);
  std::vector<float> gate(static_cast<size_t>(n)), up(gate.size()), work(gate.size());
  for (auto& v : gate) v = dist(rng);
  for (auto& v : up) v = dist(rng);
  for (auto _ : state) {
    work = gate;
    if (silu) {
      ember::tensor::silu_mul(work.data(), up.data(), n);
    } else {
      ember::tensor::gelu_mul(work.data(), up.data(), n);
    }
    benchmark::DoNotOptimize(work.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Greedy decoding's pick over one token's logits (N(0, 3) draws: the maximum anywhere in the
// row), cache-resident as a step leaves them.
void bm_argmax(benchmark::State& state, int32_t n) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.f, 3.f);
  std::vector<float> logits(static_cast<size_t>(n));
  for (auto& v : logits) v = dist(rng);
  for (auto _ : state) benchmark::DoNotOptimize(ember::tensor::argmax(logits.data(), n));
  state.SetItemsProcessed(state.iterations() * n);
}

// One SmolLM2-135M Q4_1 decode step's matmuls and nothing else: per layer q/k/v (one fused job),
// o, gate/up (fused), down, then the Q8_0 output projection, 121 jobs through the pool from
// memory (97 MB, in one huge-page arena), optionally with serial_ns of busy work on the caller
// after each job (the engine thread's norms, rope, quantization between matmuls). Against
// "decode_chain/smollm2_as_two" (the same bytes as two matrices): what the job structure and
// the serial work cost a 2-thread decode, apart from everything else in a step.
void bm_decode_chain(benchmark::State& state, bool as_two, int64_t serial_ns) {
  const int threads = static_cast<int>(state.range(0));
  struct Spec {
    DType t;
    int64_t rows, cols;
  };
  std::vector<std::vector<Spec>> jobs;
  constexpr int64_t kE = 576, kF = 1536, kKv = 192, kVocab = 49152, kLayers = 30;
  if (as_two) {
    jobs.push_back({{DType::Q4_1, kLayers * (2 * kE + 2 * kKv + 2 * kF), kE}});
    jobs.push_back({{DType::Q4_1, kLayers * kE, kF}});
  } else {
    for (int64_t l = 0; l < kLayers; ++l) {
      jobs.push_back({{DType::Q4_1, kE, kE}, {DType::Q4_1, kKv, kE}, {DType::Q4_1, kKv, kE}});
      jobs.push_back({{DType::Q4_1, kE, kE}});
      jobs.push_back({{DType::Q4_1, kF, kE}, {DType::Q4_1, kF, kE}});
      jobs.push_back({{DType::Q4_1, kE, kF}});
    }
  }
  jobs.push_back({{DType::Q8_0, kVocab, kE}});
  size_t total = 0;
  for (const auto& j : jobs) {
    for (const Spec& m : j) total += ember::tensor::row_bytes(m.t, m.cols) * size_t(m.rows) + 64;
  }
  auto arena = ember::tensor::WeightArena::create(total);
  if (!arena) {
    state.SkipWithError("no huge-page arena");
    return;
  }
  std::vector<std::vector<ember::tensor::Matrix>> mats;
  int64_t bytes = 0;
  for (const auto& j : jobs) {
    mats.emplace_back();
    for (const Spec& m : j) {
      int32_t lanes = 0;
      const std::vector<uint8_t> q = weight_bytes(m.t, m.rows, m.cols, &lanes);
      mats.back().push_back({m.t, m.rows, m.cols, arena->add(q.data(), q.size()), lanes});
      bytes += static_cast<int64_t>(q.size());
    }
  }
  std::vector<float> x(kF, 0.5f);
  std::vector<std::vector<float>> ys(ember::tensor::kMaxMatmulOuts);
  for (auto& y : ys) y.resize(static_cast<size_t>(kLayers * (2 * kE + 2 * kKv + 2 * kF)));
  ember::tensor::ThreadPool pool(threads);
  for (auto _ : state) {
    for (const auto& m : mats) {
      std::array<ember::tensor::MatmulOut, ember::tensor::kMaxMatmulOuts> outs;
      for (size_t i = 0; i < m.size(); ++i) outs[i] = {&m[i], ys[i].data()};
      ember::tensor::matmul(std::span(outs.data(), m.size()), x.data(), 1, pool);
      if (serial_ns > 0) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(serial_ns);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    }
    benchmark::DoNotOptimize(ys[0].data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["jobs"] = static_cast<double>(mats.size());
}

struct Case {
  DType type;
  int64_t rows, cols;
  bool prefill;  // also at n_tokens = 64
};

void register_all() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Case> cases;
  // Generic shapes, every type.
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q5_0,
                  DType::Q4_1, DType::Q5_1, DType::Q2_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    cases.push_back({t, 640, 2048, true});
    cases.push_back({t, 2048, 640, true});
    cases.push_back({t, 4096, 4096, false});
  }
  // Gemma 3 270M Q4_K_M: the real types at the real shapes (rows = output features).
  cases.push_back({DType::Q8_0, 256, 640, true});      // attn_v
  cases.push_back({DType::Q8_0, 262144, 640, false});  // output (tied token_embd)
  cases.push_back({DType::Q5_0, 1024, 640, true});     // attn_q
  cases.push_back({DType::Q5_0, 256, 640, true});      // attn_k
  cases.push_back({DType::Q4_K, 640, 1024, true});     // attn_output
  // SmolLM2-135M Q4_1: the feed-forward shapes.
  cases.push_back({DType::Q4_1, 1536, 576, true});  // ffn_gate, ffn_up
  cases.push_back({DType::Q4_1, 576, 1536, true});  // ffn_down
  // Larger than the last-level cache (32 MiB here): decode streams every weight from memory,
  // which the small shapes above (cache-resident after the first iteration) do not show.
  cases.push_back({DType::Q5_0, 131072, 640, false});
  cases.push_back({DType::Q4_1, 131072, 576, false});
  cases.push_back({DType::Q4_K, 65536, 1024, false});
  cases.push_back({DType::Q6_K, 65536, 1024, false});
  // SmolLM2's FFN width (SiLU) and Gemma 3 270M's (GELU).
  benchmark::RegisterBenchmark("activation/silu_mul/1536",
                               [](benchmark::State& st) { bm_activation(st, true, 1536); });
  benchmark::RegisterBenchmark("activation/gelu_mul/2048",
                               [](benchmark::State& st) { bm_activation(st, false, 2048); });
  // SmolLM2's vocabulary and Gemma 3's.
  for (int32_t n : {49152, 262144}) {
    benchmark::RegisterBenchmark(("argmax/" + std::to_string(n)).c_str(),
                                 [n](benchmark::State& st) { bm_argmax(st, n); })
        ->Unit(benchmark::kMicrosecond);
  }
  const std::pair<const char*, KvLayoutKind> layouts[] = {{"blocks", KvLayoutKind::kBlocks},
                                                          {"head_major", KvLayoutKind::kHeadMajor},
                                                          {"per_layer", KvLayoutKind::kPerLayer},
                                                          {"per_head", KvLayoutKind::kPerHead}};
  for (const auto& [name, kind] : layouts) {
    benchmark::RegisterBenchmark(
        (std::string("attention_decode_4096/") + name).c_str(),
        [kind = kind](benchmark::State& st) { bm_attention_layout(st, kind, 4096); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  // The same at a 256-token context (5.9 MB of K and V: from the caches, as in a batch of short
  // conversations), in the cache's layout (head-major blocks).
  benchmark::RegisterBenchmark(
      "attention_decode_256/head_major",
      [](benchmark::State& st) { bm_attention_layout(st, KvLayoutKind::kHeadMajor, 256); })
      ->UseRealTime()
      ->Unit(benchmark::kMicrosecond);
  for (const auto& [name, as_two, serial_ns] :
       {std::tuple("decode_chain/smollm2", false, int64_t{0}),
        std::tuple("decode_chain/smollm2/serial_ns:2500", false, int64_t{2500}),
        std::tuple("decode_chain/smollm2_as_two", true, int64_t{0})}) {
    auto* b = benchmark::RegisterBenchmark(
        name, [as_two = as_two, serial_ns = serial_ns](benchmark::State& st) {
          bm_decode_chain(st, as_two, serial_ns);
        });
    b->ArgName("threads")->Arg(1);
    if (hw > 1) b->Arg(hw);
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  for (const Case& c : cases) {
    // 8 tokens: batched decode at 8 streams (weights from memory, each row reused 8 times).
    for (int64_t n_tokens : {1, 8, 16, 32, 64}) {
      if (n_tokens == 64 && !c.prefill) continue;
      if (c.cols % ember::tensor::block_elems(c.type) != 0) continue;  // K types need 256 | cols
      const std::string name = std::string("matmul/") +
                               std::string(ember::tensor::dtype_name(c.type)) + "/" +
                               std::to_string(c.rows) + "x" + std::to_string(c.cols) +
                               "/tokens:" + std::to_string(n_tokens);
      auto* b = benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
        bm_matmul(st, c.type, c.rows, c.cols, n_tokens);
      });
      b->ArgName("threads")->Arg(1);
      if (hw > 1) b->Arg(hw);
      b->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  // EMBER_SIMD_LEVEL=avx2 (or scalar, avx512-vnni, avx512-amx) runs that level's kernels: A/B on
  // one host.
  if (const char* level = std::getenv("EMBER_SIMD_LEVEL"); level != nullptr && *level != 0) {
    if (!ember::tensor::set_simd_level(level)) {
      std::fprintf(stderr, "EMBER_SIMD_LEVEL=%s: not a level this CPU has\n", level);
      return 2;
    }
  }
  std::fprintf(stderr, "simd level %s\n", std::string(ember::tensor::simd_level()).c_str());
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
