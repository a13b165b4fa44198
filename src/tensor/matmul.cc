// matmul: activations are quantized once per token row into the weight type's vec_dot_type, then
// output rows are split across the pool. Where the active SIMD level has GEMM tiles
// (gemm_tiles.h), a few weight rows are unpacked once and dotted against a few tokens at a time
// with the accumulators in registers; otherwise each weight row is dotted against every token.
// Either way a row is read from memory once per call whatever n_tokens is (decode is bound by
// streaming weights; prefill and batched decode reuse each row from cache).
//
// Several products of the same activations (a layer's q, k and v; its gate and up) run as one
// job: the activations are quantized once per vec_dot_type, and the work units of every matrix
// go to the pool in one hand-off. A decode step issues a few hundred matmuls, and each hand-off
// costs a wake-up and a wait for the slowest thread; small matrices (SmolLM2's k and v, 69 KB
// each) would otherwise run on the caller alone while the other threads wait.
#include "tensor/matmul.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

#include "base/result.h"
#include "tensor/interleave.h"
#include "tensor/quant.h"
#include "tensor/quant_simd.h"
#include "tensor/task_plan.h"

namespace ember::tensor {
namespace {

// A chunk streams at least kMinChunkBytes of weights (times tokens): handing a thread less costs
// more in wake-up and cache traffic than it saves (a 640x256 Q8_0 decode matmul is ~174 KB, a
// few microseconds).
constexpr int64_t kMinChunkBytes = 64 << 10;
// Up to this many tokens a product runs as contiguous blocks of tasks, one block per thread
// (matmul below, tensor/task_plan.h), the smallest task at least kMinTaskBytes (times tokens).
constexpr int64_t kContiguousTokens = 16;
constexpr int64_t kMinTaskBytes = 16 << 10;

enum class Mode { kDot, kPacked, kRows, kTiles, kInterleaved, kDeinterleave };

// One product, split into `units` (rows, row tiles or packed row blocks) of which a task takes
// at least `min_units`.
struct Product {
  const Matrix* w = nullptr;
  float* y = nullptr;
  size_t ys = 0;               // y's token stride (w->rows, or the whole matrix's for a group)
  const uint8_t* a = nullptr;  // quantized activations, a_row_bytes per token
  size_t a_row_bytes = 0, w_row_bytes = 0;
  int64_t n_tokens = 0;
  Mode mode = Mode::kDot;
  DotKernel dot = nullptr;
  simd::GemmKernel g;
  int64_t unit_rows = 1;  // rows per unit
  int64_t units = 0, min_units = 1;
  const void* prep = nullptr;  // kInterleaved: g.interleaved_prepare's result for a
};

Product plan(const Matrix& w, float* y, const uint8_t* a, int64_t n_tokens) {
  EMBER_ASSERT(w.data != nullptr && w.rows > 0 && w.cols > 0 && n_tokens >= 1);
  EMBER_ASSERT(w.cols % block_elems(w.type) == 0);
  Product p;
  p.w = &w;
  p.y = y;
  p.ys = static_cast<size_t>(w.rows);
  p.a = a;
  p.n_tokens = n_tokens;
  p.w_row_bytes = row_bytes(w.type, w.cols);
  p.a_row_bytes = row_bytes(vec_dot_type(w.type), w.cols);
  p.g = active_gemm_kernel(w.type);
  const simd::GemmKernel& g = p.g;
  const auto min_units_for = [&](int64_t unit_bytes) {
    return std::max<int64_t>(1, kMinChunkBytes / std::max<int64_t>(1, unit_bytes));
  };
  if (w.interleave > 0) {
    // Whole groups of interleaved rows: the level's own kernel for the layout, or (another
    // level, e.g. after set_simd_level) each group de-interleaved into scratch and run plain.
    p.mode = g.interleaved_run != nullptr && g.interleave_rows == w.interleave
                 ? Mode::kInterleaved
                 : Mode::kDeinterleave;
    p.unit_rows = w.interleave;
    p.min_units = min_units_for(p.unit_rows * static_cast<int64_t>(p.w_row_bytes) * n_tokens);
  } else if (g.tile == nullptr) {
    p.mode = Mode::kDot;
    p.dot = active_dot_kernel(w.type);
    p.unit_rows = 1;
  } else if (g.has_packed() && n_tokens >= g.pack_min_tokens) {
    // Blocks of g.pack_rows rows, unpacked once into the thread's scratch, then dotted against
    // every token (activations from L2, the packed rows from L1).
    p.mode = Mode::kPacked;
    p.unit_rows = g.pack_rows;
    p.min_units = min_units_for(p.unit_rows * static_cast<int64_t>(p.w_row_bytes) * n_tokens);
  } else if (n_tokens == 1 && g.decode_rows == 1 && g.rows != nullptr) {
    // One sequential stream per thread: whole runs of rows, one call per chunk.
    p.mode = Mode::kRows;
    p.unit_rows = 1;
    p.min_units = min_units_for(static_cast<int64_t>(p.w_row_bytes));
  } else {
    // Tiles of g.max_rows weight rows x g.max_tokens tokens; a task takes whole row tiles and
    // runs every token tile over them, so its weight rows stay in L1 while the activations (a
    // few KB per token) come from L2.
    p.mode = Mode::kTiles;
    p.unit_rows = n_tokens == 1 ? g.decode_rows : g.max_rows;
    p.min_units = min_units_for(p.unit_rows * static_cast<int64_t>(p.w_row_bytes) * n_tokens);
  }
  p.units = (w.rows + p.unit_rows - 1) / p.unit_rows;
  return p;
}

// Units [u0, u1) of p.
void run(const Product& p, int64_t u0, int64_t u1) {
  const auto* wb = static_cast<const uint8_t*>(p.w->data);
  const int64_t rows = p.w->rows, cols = p.w->cols;
  const size_t wrb = p.w_row_bytes, arb = p.a_row_bytes, ys = p.ys;
  const simd::GemmKernel& g = p.g;
  switch (p.mode) {
    case Mode::kDot:
      for (int64_t r = u0; r < u1; ++r) {
        const uint8_t* wr = wb + static_cast<size_t>(r) * wrb;
        for (int64_t t = 0; t < p.n_tokens; ++t) {
          p.y[static_cast<size_t>(t) * ys + static_cast<size_t>(r)] =
              p.dot(cols, wr, p.a + t * arb);
        }
      }
      return;
    case Mode::kInterleaved: {
      const int64_t r0 = u0 * p.unit_rows, r1 = u1 * p.unit_rows;  // whole groups
      g.interleaved_run(cols, wb + static_cast<size_t>(r0) * wrb, r1 - r0, p.a, arb, p.n_tokens,
                        p.prep, p.y + r0, ys);
      return;
    }
    case Mode::kDeinterleave: {
      thread_local std::vector<uint8_t> plain;
      const size_t group_bytes = static_cast<size_t>(p.unit_rows) * wrb;
      if (plain.size() < group_bytes) plain.resize(group_bytes);
      for (int64_t i = u0; i < u1; ++i) {
        const int64_t r = i * p.unit_rows;
        deinterleave_rows(*p.w, r, p.unit_rows, plain.data());
        const Matrix group{p.w->type, p.unit_rows, cols, plain.data()};
        Product q = plan(group, p.y + r, p.a, p.n_tokens);
        q.ys = ys;
        run(q, 0, q.units);
      }
      return;
    }
    case Mode::kPacked: {
      if (g.packed_run != nullptr) {
        const int64_t r0 = u0 * p.unit_rows, r1 = std::min(rows, u1 * p.unit_rows);
        g.packed_run(cols, wb + static_cast<size_t>(r0) * wrb, wrb, r1 - r0, p.a, arb, p.n_tokens,
                     p.y + r0, ys);
        return;
      }
      const size_t pb = g.pack_bytes(cols);
      thread_local std::vector<uint8_t> packed;
      if (packed.size() < pb) packed.resize(pb);
      for (int64_t i = u0; i < u1; ++i) {
        const int64_t r = i * p.unit_rows;
        const int nr = static_cast<int>(std::min(p.unit_rows, rows - r));
        g.pack(cols, wb + static_cast<size_t>(r) * wrb, wrb, nr, packed.data());
        g.packed(cols, packed.data(), nr, p.a, arb, p.n_tokens, p.y + r, ys);
      }
      return;
    }
    case Mode::kRows:
      g.rows(cols, wb + static_cast<size_t>(u0) * wrb, wrb, u1 - u0, p.a, p.y + u0);
      return;
    case Mode::kTiles: {
      const int64_t mr = p.unit_rows, mt = g.max_tokens;
      for (int64_t i = u0; i < u1; ++i) {
        const int64_t r = i * mr;
        const int nr = static_cast<int>(std::min(mr, rows - r));
        const uint8_t* wr = wb + static_cast<size_t>(r) * wrb;
        for (int64_t t = 0; t < p.n_tokens; t += mt) {
          const int nt = static_cast<int>(std::min(mt, p.n_tokens - t));
          g.tile(cols, wr, wrb, nr, p.a + t * arb, arb, nt,
                 p.y + static_cast<size_t>(t) * ys + static_cast<size_t>(r), ys);
        }
      }
      return;
    }
  }
}

struct Task {
  int32_t product;  // -1: every product, then the rows function (matmul_then)
  int64_t u0, u1;
};

// The products' units run together, and then(r0, r1) on each task's rows (see matmul.h), when
// every product cuts its rows into the same units.
bool same_units(std::span<const Product> ps) {
  for (const Product& p : ps) {
    if (p.units != ps[0].units || p.unit_rows != ps[0].unit_rows) return false;
  }
  return true;
}

void matmul_then(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens,
                 ThreadPool& pool, const RowsFn* then) {
  EMBER_ASSERT(!outs.empty() && outs.size() <= kMaxMatmulOuts && n_tokens >= 1);
  const int64_t cols = outs[0].w->cols;

  // One quantized copy of x per distinct vec_dot_type, reused across calls on this thread (the
  // engine thread issues every matmul of a step).
  struct Act {
    DType type;
    std::vector<uint8_t> bytes;
  };
  thread_local std::array<Act, kMaxMatmulOuts> acts;
  std::array<const uint8_t*, kMaxMatmulOuts> act_of{};
  size_t n_acts = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    EMBER_ASSERT(outs[i].w->cols == cols);
    const DType at = vec_dot_type(outs[i].w->type);
    size_t k = 0;
    while (k < n_acts && acts[k].type != at) ++k;
    if (k == n_acts) {
      Act& act = acts[n_acts++];
      act.type = at;
      const size_t arb = row_bytes(at, cols);
      if (act.bytes.size() < arb * static_cast<size_t>(n_tokens)) {
        act.bytes.resize(arb * static_cast<size_t>(n_tokens));
      }
      uint8_t* a = act.bytes.data();
      if (n_tokens >= 4) {
        pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) quantize_row(at, x + t * cols, a + t * arb, cols);
        });
      } else {
        for (int64_t t = 0; t < n_tokens; ++t) quantize_row(at, x + t * cols, a + t * arb, cols);
      }
    }
    act_of[i] = acts[k].bytes.data();
  }

  // Every product's units in tasks, all handed to the pool at once. Prefill: tasks of
  // max(min_units, units / (4 x threads)), claimed in order, so fast threads take up the slack of
  // slow ones. Decode, up to kContiguousTokens tokens: one share of equal weight bytes per thread,
  // cut into tasks of halving size (tensor/task_plan.h), run as parallel_for_blocks, so each
  // thread streams one contiguous stretch of the products (a longer stream for the prefetchers;
  // up to 10% more batch-1 decode than 4 interleaved tasks per thread on the Zen 5 host,
  // f1f424c; docs/perf-notes.md, "Splitting a decode step across two threads") and a thread
  // done with its own takes the tail of a late or slow one's.
  std::array<Product, kMaxMatmulOuts> products;
  for (size_t i = 0; i < outs.size(); ++i) {
    products[i] = plan(*outs[i].w, outs[i].y, act_of[i], n_tokens);
  }
  // The interleaved kernels' work on the activations, once per matmul here rather than once per
  // task: products of one kernel type share one activation copy, so one preparation.
  for (size_t i = 0; i < outs.size(); ++i) {
    Product& p = products[i];
    if (p.mode != Mode::kInterleaved) continue;
    EMBER_ASSERT(p.g.interleaved_prepare != nullptr);
    for (size_t j = 0; j < i && p.prep == nullptr; ++j) {
      if (products[j].mode == Mode::kInterleaved &&
          products[j].g.interleaved_prepare == p.g.interleaved_prepare && products[j].a == p.a) {
        p.prep = products[j].prep;
      }
    }
    if (p.prep == nullptr) {
      p.prep = p.g.interleaved_prepare(p.w->cols, p.a, p.a_row_bytes, n_tokens);
    }
  }
  const std::span<const Product> ps(products.data(), outs.size());
  for (const Product& p : ps) EMBER_ASSERT(then == nullptr || p.w->rows == ps[0].w->rows);
  const bool together = then != nullptr && same_units(ps);
  const bool blocks = n_tokens <= kContiguousTokens;
  const auto unit_bytes = [&](const Product& p) {
    return p.unit_rows * static_cast<int64_t>(p.w_row_bytes);
  };
  int64_t total_bytes = 0;
  for (const Product& p : ps) total_bytes += p.units * unit_bytes(p);
  // Together: whole multiples of kRowsAlign rows per task (the last task ends at the last row).
  const int64_t align = together ? kRowsAlign / std::gcd(kRowsAlign, ps[0].unit_rows) : 1;
  thread_local std::vector<Task> tasks;
  thread_local std::vector<int64_t> starts;
  tasks.clear();
  if (blocks) {
    thread_local std::vector<UnitRun> runs;
    thread_local std::vector<PlannedTask> planned;
    runs.clear();
    if (together) {
      // One stream of units, each one of every product's: as many bytes as all of theirs.
      runs.push_back({ps[0].units, std::max<int64_t>(1, total_bytes / ps[0].units), align});
    } else {
      for (const Product& p : ps) runs.push_back({p.units, unit_bytes(p), 1});
    }
    plan_decode_tasks(runs, pool.size(), kMinChunkBytes / n_tokens, kMinTaskBytes / n_tokens,
                      &planned, &starts);
    for (const PlannedTask& k : planned) tasks.push_back({together ? -1 : k.run, k.u0, k.u1});
  } else {
    for (size_t i = 0; i < ps.size(); ++i) {
      const Product& p = ps[i];
      const int64_t per_thread = 4 * static_cast<int64_t>(pool.size());
      int64_t chunk = std::max(p.min_units, (p.units + per_thread - 1) / per_thread);
      chunk = (chunk + align - 1) / align * align;
      for (int64_t u = 0; u < p.units; u += chunk) {
        tasks.push_back({together ? -1 : static_cast<int32_t>(i), u, std::min(p.units, u + chunk)});
      }
      if (together) break;  // one task list for all the products
    }
  }
  const std::vector<Task>& job = tasks;  // this thread's list: workers have their own
  const auto run_tasks = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const Task& k = job[static_cast<size_t>(t)];
      if (k.product >= 0) {
        run(ps[static_cast<size_t>(k.product)], k.u0, k.u1);
        continue;
      }
      for (const Product& p : ps) run(p, k.u0, k.u1);
      const int64_t ur = ps[0].unit_rows;
      (*then)(k.u0 * ur, std::min(ps[0].w->rows, k.u1 * ur));
    }
  };
  if (blocks) {
    pool.parallel_for_blocks(static_cast<int64_t>(job.size()), starts, run_tasks);
  } else {
    pool.parallel_for(static_cast<int64_t>(job.size()), run_tasks);
  }
  if (then == nullptr || together) return;
  const int64_t rows = ps[0].w->rows;
  pool.parallel_for((rows + kRowsAlign - 1) / kRowsAlign, [&](int64_t b0, int64_t b1) {
    (*then)(b0 * kRowsAlign, std::min(rows, b1 * kRowsAlign));
  });
}

}  // namespace

void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens, ThreadPool& pool) {
  matmul_then(outs, x, n_tokens, pool, nullptr);
}

void matmul(std::span<const MatmulOut> outs, const float* x, int64_t n_tokens, ThreadPool& pool,
            const RowsFn& then) {
  matmul_then(outs, x, n_tokens, pool, &then);
}

void matmul(const Matrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool) {
  const MatmulOut out{&w, y};
  matmul(std::span<const MatmulOut>(&out, 1), x, n_tokens, pool);
}

void get_row(const Matrix& w, int64_t row, float* out) {
  EMBER_ASSERT(row >= 0 && row < w.rows);
  const auto* wb = static_cast<const uint8_t*>(w.data);
  const size_t rb = row_bytes(w.type, w.cols);
  if (w.interleave > 0) {
    thread_local std::vector<uint8_t> plain;
    if (plain.size() < rb) plain.resize(rb);
    deinterleave_rows(w, row, 1, plain.data());
    dequantize_row(w.type, plain.data(), out, w.cols);
    return;
  }
  dequantize_row(w.type, wb + static_cast<size_t>(row) * rb, out, w.cols);
}

}  // namespace ember::tensor
