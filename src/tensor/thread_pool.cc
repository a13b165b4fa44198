// Persistent workers woken per parallel_for. A job is published by writing its fields, then the
// claim word (release), then bumping `generation`; workers spin briefly on the generation (decode
// steps issue matmuls back-to-back, and a futex wake costs more than a short spin), then sleep on
// a condition variable. Chunks are claimed by CAS on one 64-bit word holding
// (generation, chunk count, next chunk), so a worker that wakes late for an old job fails its
// claim instead of touching the job fields; a successful claim pins the job (the caller waits
// for every chunk to be done) so the fields it then reads are stable. The caller runs chunks
// too and waits only for chunks claimed by others, never for idle workers to check in.
#include "tensor/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

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
  // bits 63..32: generation (low 32 bits), 31..16: chunk count, 15..0: next chunk to hand out.
  std::atomic<uint64_t> claim{0};
  std::atomic<int64_t> done{0};  // chunks finished in the current job

  static uint64_t pack(uint64_t gen, uint64_t total, uint64_t next) {
    return (gen << 32) | (total << 16) | next;
  }

  // Runs chunks of job `gen` until none is left; returns how many this thread ran.
  int64_t run_chunks(uint64_t gen) {
    int64_t ran = 0;
    uint64_t s = claim.load(std::memory_order_acquire);
    for (;;) {
      if ((s >> 32) != (gen & 0xffffffffu)) return ran;
      const uint64_t total = (s >> 16) & 0xffff, next = s & 0xffff;
      if (next >= total) return ran;
      if (!claim.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                       std::memory_order_acquire)) {
        continue;
      }
      const int64_t begin = static_cast<int64_t>(next) * chunk;
      (*fn)(begin, std::min(n, begin + chunk));
      ++ran;
      s = claim.load(std::memory_order_acquire);
    }
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

  void worker() {
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
      const int64_t ran = run_chunks(g);
      if (ran > 0) {
        const uint64_t total = (claim.load(std::memory_order_relaxed) >> 16) & 0xffff;
        if (done.fetch_add(ran, std::memory_order_acq_rel) + ran == static_cast<int64_t>(total)) {
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
  impl_->threads.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 0; i + 1 < n_threads_; ++i) impl_->threads.emplace_back([this] { impl_->worker(); });
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
  Impl& p = *impl_;
  ++jobs_;
  const int64_t t0 = timing_on_ ? now_ns() : 0;
  // A few chunks per thread lets fast threads take up the slack of slow ones; the chunk count
  // must fit the claim word's 16 bits.
  int64_t chunk = std::max(min_chunk, (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  chunk = std::max(chunk, (n + 0xfffe) / 0xffff);
  const int64_t total = (n + chunk - 1) / chunk;
  p.fn = &fn;
  p.n = n;
  p.chunk = chunk;
  p.done.store(0, std::memory_order_relaxed);
  uint64_t gen;
  {
    std::lock_guard lk(p.mu);
    gen = p.generation.load(std::memory_order_relaxed) + 1;
    p.claim.store(Impl::pack(gen & 0xffffffffu, static_cast<uint64_t>(total), 0),
                  std::memory_order_release);
    p.generation.store(gen, std::memory_order_release);
  }
  p.cv_work.notify_all();
  const int64_t ran = p.run_chunks(gen);
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
