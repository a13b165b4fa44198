// Persistent workers woken per parallel_for. A job is published by writing its fields, then the
// claim word (release), then bumping `generation`; workers spin briefly on the generation (decode
// steps issue matmuls back-to-back, and a futex wake costs more than a short spin), then sleep on
// a condition variable. Chunks are claimed by CAS on one 64-bit word holding
// (generation, chunk count, next chunk), so a worker that wakes late for an old job fails its
// claim instead of touching the job fields; a successful claim pins the job (the caller waits
// for every chunk to be done) so the fields it then reads are stable. The caller runs chunks
// too and waits only for chunks claimed by others, never for idle workers to check in.
//
// parallel_for_blocks claims through one word per thread instead (each on its own cache line):
// (generation, front, back) of that thread's block. A thread takes its own block's front, then
// the other blocks' backs; the shared word then carries the job's generation with no chunks, so
// a worker tries both kinds of word and only one has chunks of the current generation.
#include "tensor/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "base/result.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember::tensor {
namespace {

// Spin step i of a wait: pause first, then yield so that an oversubscribed machine (more
// threads than free cores) lets the thread holding the work run.
inline void spin_wait(int i) {
  if (i < 256) {
#if defined(__x86_64__)
    _mm_pause();
#endif
  } else {
    std::this_thread::yield();
  }
}

constexpr int kSpinIters = 2048;  // then sleep on the condition variable

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stop{false};

  // The current job: written by the caller before publishing `claim`, read-only while it runs.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;
  int64_t total = 0;  // chunks in the job
  // bits 63..32: generation (low 32 bits), 31..16: chunk count, 15..0: next chunk to hand out.
  std::atomic<uint64_t> claim{0};
  std::atomic<int64_t> done{0};  // chunks finished in the current job
  // parallel_for_blocks: per thread (the caller's first), bits 63..32 generation, 31..16 the
  // block's front, 15..0 its back (chunks [front, back) left).
  struct alignas(64) Block {
    std::atomic<uint64_t> word{0};
  };
  std::vector<Block> blocks;

  static uint64_t pack(uint64_t gen, uint64_t a, uint64_t b) { return (gen << 32) | (a << 16) | b; }
  static bool current(uint64_t s, uint64_t gen) { return (s >> 32) == (gen & 0xffffffffu); }

  void run_chunk(uint64_t c) {
    const int64_t begin = static_cast<int64_t>(c) * chunk;
    (*fn)(begin, std::min(n, begin + chunk));
  }

  // Claims a chunk of job `gen` from block b's front (own) or back (another's); -1: none left.
  int64_t take(size_t b, uint64_t gen, bool front) {
    std::atomic<uint64_t>& w = blocks[b].word;
    uint64_t s = w.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = (s >> 16) & 0xffff, hi = s & 0xffff;
      if (!current(s, gen) || lo >= hi) return -1;
      const uint64_t next =
          front ? pack(gen & 0xffffffffu, lo + 1, hi) : pack(gen & 0xffffffffu, lo, hi - 1);
      if (w.compare_exchange_weak(s, next, std::memory_order_acquire, std::memory_order_acquire)) {
        return static_cast<int64_t>(front ? lo : hi - 1);
      }
    }
  }

  // Runs chunks of job `gen` until none is left; returns how many this thread (block `self`)
  // ran.
  int64_t run_chunks(uint64_t gen, size_t self) {
    int64_t ran = 0;
    uint64_t s = claim.load(std::memory_order_acquire);
    for (;;) {
      if (!current(s, gen)) break;
      const uint64_t count = (s >> 16) & 0xffff, next = s & 0xffff;
      if (next >= count) break;
      if (!claim.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                       std::memory_order_acquire)) {
        continue;
      }
      run_chunk(next);
      ++ran;
      s = claim.load(std::memory_order_acquire);
    }
    // A block job's shared word has no chunks: its own block, then the others' backs.
    for (int64_t c; (c = take(self, gen, true)) >= 0; ++ran) run_chunk(static_cast<uint64_t>(c));
    for (size_t k = 1; k < blocks.size(); ++k) {
      const size_t b = (self + k) % blocks.size();
      for (int64_t c; (c = take(b, gen, false)) >= 0; ++ran) run_chunk(static_cast<uint64_t>(c));
    }
    return ran;
  }

  // The caller's wait for chunks that other threads claimed.
  void wait_done(int64_t total) {
    for (int i = 0; i < kSpinIters; ++i) {
      if (done.load(std::memory_order_acquire) == total) return;
      spin_wait(i);
    }
    std::unique_lock lk(mu);
    cv_done.wait(lk, [&] { return done.load(std::memory_order_acquire) == total; });
  }

  void worker(size_t self) {
    uint64_t seen = 0;
    for (;;) {
      uint64_t g = generation.load(std::memory_order_acquire);
      for (int i = 0; g == seen && i < kSpinIters && !stop.load(std::memory_order_relaxed); ++i) {
        spin_wait(i);
        g = generation.load(std::memory_order_acquire);
      }
      if (g == seen) {
        std::unique_lock lk(mu);
        cv_work.wait(lk, [&] {
          return stop.load(std::memory_order_relaxed) ||
                 generation.load(std::memory_order_acquire) != seen;
        });
        g = generation.load(std::memory_order_acquire);
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = g;
      const int64_t ran = run_chunks(g, self);
      if (ran > 0) {
        // Read before counting these chunks as done: until then the job cannot end, so `total`
        // is still this job's (after it, the caller may already be publishing the next one).
        const int64_t job_total = total;
        if (done.fetch_add(ran, std::memory_order_acq_rel) + ran == job_total) {
          std::lock_guard lk(mu);
          cv_done.notify_one();
        }
      }
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  if (n_threads_ <= 1) return;
  impl_ = new Impl;
  impl_->blocks = std::vector<Impl::Block>(static_cast<size_t>(n_threads_));
  impl_->threads.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 0; i + 1 < n_threads_; ++i) {
    impl_->threads.emplace_back([this, i] { impl_->worker(static_cast<size_t>(i) + 1); });
  }
}

ThreadPool::~ThreadPool() {
  if (!impl_) return;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop.store(true, std::memory_order_release);
  }
  impl_->cv_work.notify_all();
  for (auto& t : impl_->threads) t.join();
  delete impl_;
}

void ThreadPool::set_timing(bool on) {
  timing_on_ = on;
  timing_ = {};
  last_end_ns_ = -1;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  parallel_for(n, 1, fn);
}

void ThreadPool::parallel_for(int64_t n, int64_t min_chunk,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (!impl_ || n <= min_chunk) {
    fn(0, n);
    return;
  }
  // A few chunks per thread lets fast threads take up the slack of slow ones; the chunk count
  // must fit the claim word's 16 bits.
  int64_t chunk = std::max(min_chunk, (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  chunk = std::max(chunk, (n + 0xfffe) / 0xffff);
  run_job(n, chunk, {}, fn);
}

void ThreadPool::parallel_for_blocks(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (!impl_ || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, i + 1);
    return;
  }
  // Equal blocks by count, the caller's first.
  std::vector<int64_t> starts(static_cast<size_t>(n_threads_));
  for (int k = 0; k < n_threads_; ++k) starts[static_cast<size_t>(k)] = k * n / n_threads_;
  parallel_for_blocks(n, starts, fn);
}

void ThreadPool::parallel_for_blocks(int64_t n, std::span<const int64_t> starts,
                                     const std::function<void(int64_t, int64_t)>& fn) {
  EMBER_ASSERT(!starts.empty() && starts[0] == 0);
  EMBER_ASSERT(std::is_sorted(starts.begin(), starts.end()) && starts.back() <= n);
  if (n <= 0) return;
  if (!impl_ || starts.size() == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, i + 1);
    return;
  }
  EMBER_ASSERT(n <= 0xffff);
  // Listed past the thread count: the last thread's block runs to n.
  run_job(n, 1, starts.first(std::min(starts.size(), static_cast<size_t>(n_threads_))), fn);
}

void ThreadPool::run_job(int64_t n, int64_t chunk, std::span<const int64_t> starts,
                         const std::function<void(int64_t, int64_t)>& fn) {
  const bool blocks = !starts.empty();
  Impl& p = *impl_;
  ++jobs_;
  const int64_t t0 = timing_on_ ? now_ns() : 0;
  const int64_t total = (n + chunk - 1) / chunk;
  p.fn = &fn;
  p.n = n;
  p.chunk = chunk;
  p.total = total;
  p.done.store(0, std::memory_order_relaxed);
  uint64_t gen;
  {
    std::lock_guard lk(p.mu);
    gen = p.generation.load(std::memory_order_relaxed) + 1;
    const uint64_t g = gen & 0xffffffffu;
    if (blocks) {
      // Block b: [starts[b], starts[b + 1]), the last listed one's to the end; threads past
      // the list have empty blocks.
      const auto at = [&](size_t b) { return b < starts.size() ? starts[b] : total; };
      for (size_t b = 0; b < p.blocks.size(); ++b) {
        p.blocks[b].word.store(
            Impl::pack(g, static_cast<uint64_t>(at(b)), static_cast<uint64_t>(at(b + 1))),
            std::memory_order_relaxed);
      }
    }
    p.claim.store(Impl::pack(g, blocks ? 0 : static_cast<uint64_t>(total), 0),
                  std::memory_order_release);
    p.generation.store(gen, std::memory_order_release);
  }
  p.cv_work.notify_all();
  const int64_t ran = p.run_chunks(gen, 0);
  const int64_t t1 = timing_on_ ? now_ns() : 0;
  if (p.done.fetch_add(ran, std::memory_order_acq_rel) + ran != total) p.wait_done(total);
  if (timing_on_) {
    const int64_t t2 = now_ns();
    ++timing_.jobs;
    timing_.run_ns += t1 - t0;
    timing_.wait_ns += t2 - t1;
    if (last_end_ns_ >= 0) timing_.serial_ns += t0 - last_end_ns_;
    last_end_ns_ = t2;
  }
}

}  // namespace ember::tensor
