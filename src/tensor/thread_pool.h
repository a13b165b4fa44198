// A fixed pool of worker threads for data-parallel loops inside one engine step.
// parallel_for blocks the caller until every chunk has run; the caller's thread takes part, and
// it never waits for a worker that has not claimed a chunk (a worker slow to wake finds the job
// already done), so a small job costs no more than running it inline.
// Not re-entrant: one parallel_for at a time per pool (the engine thread owns its pool).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

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
  // As parallel_for(n, fn), one index per call, for work whose consecutive indices read
  // consecutive memory (a matmul's row ranges): [0, n) is cut into one contiguous block per
  // thread (the caller's first, worker k's the (k + 1)-th), which each thread runs from its
  // front, in order, as one stream; a thread done with its own block then takes indices from
  // the back of the others', so a thread that wakes late or runs slow hands its block's tail to
  // the others instead of keeping them waiting (an index a thread has started is still its own:
  // one descheduled in the middle of it is waited for).
  void parallel_for_blocks(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // The same with the blocks given: thread k's block is [starts[k], starts[k + 1]) (the last
  // listed one's ends at n; starts[0] == 0, non-decreasing). Threads past starts.size() have
  // empty blocks and only take from the back of the others'. One block: run on the caller.
  void parallel_for_blocks(int64_t n, std::span<const int64_t> starts,
                           const std::function<void(int64_t, int64_t)>& fn);

  // Where the caller's time goes, for benchmarks (`ember bench --pool-timing`): per hand-off,
  // the caller running chunks (from publishing the job until none is left to claim), then
  // waiting for chunks other threads claimed, and the time between one hand-off's end and the
  // next one's start, when the caller works alone (serial work, jobs too small to hand off,
  // or idle). Off by default: a hand-off then reads no clock. Set and read by the caller's
  // thread, or by another while the caller is idle (after a handshake through a mutex).
  struct Timing {
    int64_t jobs = 0;       // hand-offs timed
    int64_t run_ns = 0;     // caller running chunks
    int64_t wait_ns = 0;    // caller waiting for other threads' chunks
    int64_t serial_ns = 0;  // between hand-offs (not before the first one after set_timing)
  };
  void set_timing(bool on);  // resets the counters
  Timing timing() const { return timing_; }

 private:
  struct Impl;
  // starts: parallel_for_blocks' blocks (one per thread at most); empty: parallel_for's chunks.
  void run_job(int64_t n, int64_t chunk, std::span<const int64_t> starts,
               const std::function<void(int64_t, int64_t)>& fn);
  Impl* impl_ = nullptr;
  int n_threads_ = 1;
  int64_t jobs_ = 0;  // written by the (single) caller only
  bool timing_on_ = false;
  Timing timing_;
  int64_t last_end_ns_ = -1;  // when the last timed hand-off returned; -1: none yet
};

}  // namespace ember::tensor
