// Matmul throughput per weight type, in weight bytes streamed per second (GB/s), at a decode
// shape (n_tokens = 1: memory-bound) and a prefill shape (n_tokens = 64: compute-bound).
// Run: build/kernels_bench [--benchmark_filter=Q4_K]
#include <benchmark/benchmark.h>

#include <random>
#include <thread>
#include <vector>

#include "tensor/matmul.h"
#include "tensor/quant.h"

namespace {

using ember::tensor::DType;

void bm_matmul(benchmark::State& state, DType t, int64_t rows, int64_t cols, int64_t n_tokens) {
  const int threads = static_cast<int>(state.range(0));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = dist(rng);
  const size_t rb = ember::tensor::row_bytes(t, cols);
  std::vector<uint8_t> q(rb * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    ember::tensor::quantize_row(t, w.data() + r * cols, q.data() + r * rb, cols);
  }
  std::vector<float> x(static_cast<size_t>(n_tokens * cols));
  for (auto& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(n_tokens * rows));
  ember::tensor::ThreadPool pool(threads);
  const ember::tensor::Matrix m{t, rows, cols, q.data()};
  for (auto _ : state) {
    ember::tensor::matmul(m, x.data(), n_tokens, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(q.size()));
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(state.iterations() * n_tokens),
                                               benchmark::Counter::kIsRate);
}

void register_all() {
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const DType types[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,
                         DType::Q5_0, DType::Q4_1, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  struct Shape {
    int64_t rows, cols;
  };
  for (DType t : types) {
    for (Shape s : {Shape{640, 2048}, Shape{2048, 640}, Shape{4096, 4096}}) {
      for (int64_t n_tokens : {1, 64}) {
        if (s.rows == 4096 && n_tokens != 1) continue;
        if (s.cols % ember::tensor::block_elems(t) != 0) continue;  // e.g. K types need 256 | cols
        const std::string name = std::string("matmul/") +
                                 std::string(ember::tensor::dtype_name(t)) + "/" +
                                 std::to_string(s.rows) + "x" + std::to_string(s.cols) +
                                 "/tokens:" + std::to_string(n_tokens);
        auto* b = benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
          bm_matmul(st, t, s.rows, s.cols, n_tokens);
        });
        b->ArgName("threads")->Arg(1);
        if (hw > 1) b->Arg(hw);
        b->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
