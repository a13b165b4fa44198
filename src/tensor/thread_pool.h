// A fixed pool of worker threads for data-parallel loops inside one engine step.
// parallel_for blocks the caller until every chunk has run; the caller's thread takes part, and
// it never waits for a worker that has not claimed a chunk (a worker slow to wake finds the job
// already done), so a small job costs no more than running it inline.
// Not re-entrant: one parallel_for at a time per pool (the engine thread owns its pool).
#pragma once

#include <cstdint>
#include <functional>

namespace ember::tensor {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 1: run inline on the caller
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // parallel_for calls handed to the workers so far (those run inline on the caller not
  // counted): what a caller that batches its work into fewer hand-offs can be tested by.
  int64_t jobs() const { return jobs_; }
  // Calls fn(begin, end) over disjoint ranges covering [0, n).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // As above, with every range (but the last) at least min_chunk long: a job too small to be
  // worth a second thread runs on the caller alone, and cheap indices are not handed out one
  // by one.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Impl;
  Impl* impl_ = nullptr;
  int n_threads_ = 1;
  int64_t jobs_ = 0;  // written by the (single) caller only
};

}  // namespace ember::tensor
