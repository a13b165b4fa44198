// Matmul throughput per weight type, in weight bytes streamed per second (GB/s), at a decode
// shape (n_tokens = 1: memory-bound), a batched-decode shape (8: weights from memory, each row
// used 8 times) and a prefill shape (n_tokens = 64: compute-bound), on
// generic shapes and on the shapes of the default model (Gemma 3 270M Q4_K_M).
// Run: [EMBER_SIMD_LEVEL=avx2] build/kernels_bench [--benchmark_filter=Q4_K]
//      [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
// Rates (bytes_per_second = weight bytes, tok/s) are per wall-clock second; on a shared machine
// divide the weight bytes by the CPU column instead (CPU time of the calling thread, which with
// a pool runs chunks or waits for the others the whole time).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tensor/interleave.h"
#include "tensor/matmul.h"
#include "tensor/quant.h"
#include "tensor/weight_arena.h"

namespace {

using ember::tensor::DType;

void bm_matmul(benchmark::State& state, DType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  const int threads = static_cast<int>(state.range(0));
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
  std::vector<float> x(static_cast<size_t>(n_tokens * cols));
  for (auto& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  // In 2 MiB pages, as the engine holds its weights (tensor/weight_arena.h): with 4 KiB pages a
  // matrix larger than the TLB's reach pays a nested page walk per 4 KiB under a hypervisor, and
  // how many of those a kernel overlaps depends on its access pattern, not only its arithmetic.
  // In the layout the engine copies it into (interleaved where the level's kernels read that).
  const int32_t lanes = ember::tensor::preferred_interleave(t, rows, cols);
  if (lanes > 0) {
    std::vector<uint8_t> inter(q.size());
    ember::tensor::interleave_matrix(t, rows, cols, lanes, q.data(), inter.data(), false);
    q.swap(inter);
  }
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
  for (const Case& c : cases) {
    // 8 tokens: batched decode at 8 streams (weights from memory, each row reused 8 times).
    for (int64_t n_tokens : {1, 8, 64}) {
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
  // EMBER_SIMD_LEVEL=avx2 (or scalar, avx512-vnni) runs that level's kernels: A/B on one host.
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
