// Persistent workers woken per parallel_for. A job is published by bumping `generation` (release)
// after writing the job fields; workers spin briefly on it (decode steps issue matmuls
// back-to-back, and a futex wake costs more than a short spin), then sleep on a condition
// variable. Chunks are handed out through an atomic counter, so uneven chunks balance
// themselves. The caller runs chunks too, then waits until every worker has left the job; only
// then may the job fields be rewritten.
#include "tensor/thread_pool.h"

#include <algorithm>
#include <atomic>
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

}  // namespace

struct ThreadPool::Impl {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv_work, cv_done;
  std::atomic<uint64_t> generation{0};
  std::atomic<bool> stop{false};

  // The current job: written by the caller before the generation bump, read-only while it runs.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;
  std::atomic<int64_t> next{0};
  std::atomic<int> pending{0};  // workers that have not finished the current job

  void run_chunks() {
    for (;;) {
      const int64_t begin = next.fetch_add(chunk, std::memory_order_relaxed);
      if (begin >= n) return;
      (*fn)(begin, std::min(n, begin + chunk));
    }
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
      run_chunks();
      if (pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lk(mu);
        cv_done.notify_one();
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

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (!impl_ || n == 1) {
    fn(0, n);
    return;
  }
  Impl& p = *impl_;
  // A few chunks per thread lets fast threads take up the slack of slow ones.
  p.fn = &fn;
  p.n = n;
  p.chunk = std::max<int64_t>(1, (n + 4 * n_threads_ - 1) / (4 * n_threads_));
  p.next.store(0, std::memory_order_relaxed);
  p.pending.store(static_cast<int>(p.threads.size()), std::memory_order_relaxed);
  {
    std::lock_guard lk(p.mu);
    p.generation.fetch_add(1, std::memory_order_release);
  }
  p.cv_work.notify_all();
  p.run_chunks();
  for (int i = 0; i < kSpinIters; ++i) {
    if (p.pending.load(std::memory_order_acquire) == 0) return;
    spin_wait(i);
  }
  std::unique_lock lk(p.mu);
  p.cv_done.wait(lk, [&] { return p.pending.load(std::memory_order_acquire) == 0; });
}

}  // namespace ember::tensor
