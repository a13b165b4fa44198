#include "tensor/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace ember::tensor {
namespace {

TEST(ThreadPool, covers_every_index_exactly_once_for_many_sizes_and_pool_sizes) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        ASSERT_LE(0, b);
        ASSERT_LT(b, e);
        ASSERT_LE(e, n);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(ThreadPool, returns_only_after_every_chunk_has_run_across_many_back_to_back_jobs) {
  ThreadPool pool(3);
  std::vector<int64_t> out(257);
  for (int round = 0; round < 2000; ++round) {
    // Plain (non-atomic) writes: the caller reading them after parallel_for returns is a race
    // that TSan reports unless parallel_for really waits for (and synchronizes with) the workers.
    pool.parallel_for(static_cast<int64_t>(out.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[static_cast<size_t>(i)] = i * round;
    });
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<int64_t>(i) * round);
  }
}

TEST(ThreadPool, uses_more_than_one_thread_when_it_has_them) {
  ThreadPool pool(2);
  // Each of the two chunks records the thread that ran it, then waits (bounded) for the other
  // to arrive: a pool that ran them one after the other on one thread records one id.
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::thread::id> ids;
  pool.parallel_for(2, [&](int64_t, int64_t) {
    std::unique_lock lk(mu);
    ids.insert(std::this_thread::get_id());
    cv.notify_all();
    cv.wait_for(lk, std::chrono::seconds(5), [&] { return ids.size() >= 2; });
  });
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPool, min_chunk_bounds_every_range_but_the_last_and_still_covers_each_index_once) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 63, 64, 65, 1000, 70000}) {
    for (int64_t min_chunk : {1, 7, 64}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> short_ranges{0};
      pool.parallel_for(n, min_chunk, [&](int64_t b, int64_t e) {
        if (e - b < min_chunk) {
          short_ranges.fetch_add(1);
          EXPECT_EQ(e, n) << "only the last range may be short";
        }
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      EXPECT_LE(short_ranges.load(), 1);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
  }
}

TEST(ThreadPool, a_job_within_one_min_chunk_runs_inline_on_the_caller) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  bool on_caller = true;
  pool.parallel_for(100, 100, [&](int64_t b, int64_t e) {
    ++calls;
    on_caller = on_caller && std::this_thread::get_id() == caller && b == 0 && e == 100;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(on_caller);
}

TEST(ThreadPool, a_pool_of_one_runs_inline_on_the_caller) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  bool inline_run = false;
  pool.parallel_for(10, [&](int64_t b, int64_t e) {
    inline_run = std::this_thread::get_id() == caller && b == 0 && e == 10;
  });
  EXPECT_TRUE(inline_run);
}

// With timing on, a hand-off's time splits into the caller running chunks and then waiting for
// the others', and the time between hand-offs counts as serial. Bounds come from sleeps (lower
// bounds only): the worker's chunk sleeps 30 ms after both chunks have started, the caller
// sleeps 40 ms between two hand-offs, and a job small enough to run inline is serial time, not
// a hand-off. Timing off (the default) counts nothing; set_timing resets.
TEST(ThreadPool, timing_splits_the_callers_time_into_running_waiting_and_serial) {
  using std::chrono::milliseconds;
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  auto rendezvous_then_worker_sleeps = [&](int64_t, int64_t) {
    {
      std::unique_lock lk(mu);
      ++arrived;
      cv.notify_all();
      cv.wait_for(lk, std::chrono::seconds(5), [&] { return arrived % 2 == 0; });
    }
    // The caller's wait is timed from the end of its own chunk, which a loaded host may delay
    // by milliseconds after the rendezvous (a 30 ms sleep against a 30 ms bound once failed
    // at 28.0 ms): the bound below is half the worker's sleep.
    if (std::this_thread::get_id() != caller) std::this_thread::sleep_for(milliseconds(80));
  };
  pool.parallel_for(2, rendezvous_then_worker_sleeps);
  EXPECT_EQ(pool.timing().jobs, 0) << "off by default";
  EXPECT_EQ(pool.timing().wait_ns, 0);

  pool.set_timing(true);
  pool.parallel_for(2, rendezvous_then_worker_sleeps);
  ThreadPool::Timing t = pool.timing();
  EXPECT_EQ(t.jobs, 1);
  EXPECT_GE(t.wait_ns, 40'000'000) << "the caller waited for the worker's chunk";
  EXPECT_EQ(t.serial_ns, 0) << "nothing before the first timed hand-off";
  EXPECT_GT(t.run_ns, 0);

  std::this_thread::sleep_for(milliseconds(40));
  pool.parallel_for(10, 100, [](int64_t, int64_t) {});  // inline: serial, not a hand-off
  pool.parallel_for(2, [](int64_t, int64_t) {});
  t = pool.timing();
  EXPECT_EQ(t.jobs, 2);
  EXPECT_GE(t.serial_ns, 40'000'000);
  EXPECT_LT(t.serial_ns, 30'000'000'000) << "only the time between the two hand-offs";

  pool.set_timing(false);
  EXPECT_EQ(pool.timing().jobs, 0) << "set_timing resets";
  pool.parallel_for(2, [](int64_t, int64_t) {});
  EXPECT_EQ(pool.timing().jobs, 0);
  EXPECT_EQ(pool.timing().serial_ns, 0);
}

// parallel_for_blocks, mixed with plain jobs on the same pool: every index once, one per call.
TEST(ThreadPool, blocks_cover_every_index_exactly_once_one_per_call) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int round = 0; round < 20; ++round) {
        pool.parallel_for_blocks(n, [&](int64_t b, int64_t e) {
          ASSERT_EQ(e, b + 1);
          ASSERT_LE(0, b);
          ASSERT_LT(b, n);
          hits[static_cast<size_t>(b)].fetch_add(1);
        });
        pool.parallel_for(n, [](int64_t, int64_t) {});
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 20) << i;
    }
  }
}

// Each thread's first index in a blocks job (run) on a pool of 3: every thread's first index waits
// at a barrier of all three, so none can reach another's block before each has taken its own first
// index. Returns the caller's first index and the workers' (as a set).
template <class Run>
std::pair<int64_t, std::set<int64_t>> first_indices_of_three(Run run) {
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::thread::id, int64_t> first;
  run([&](int64_t b, int64_t) {
    std::unique_lock lk(mu);
    if (first.count(std::this_thread::get_id())) return;
    first[std::this_thread::get_id()] = b;
    cv.notify_all();
    cv.wait_for(lk, std::chrono::seconds(30), [&] { return first.size() == 3; });
  });
  EXPECT_EQ(first.size(), 3u);
  std::set<int64_t> workers;
  for (const auto& [id, b] : first) {
    if (id != caller) workers.insert(b);
  }
  return {first.count(caller) ? first[caller] : -1, workers};
}

// Each thread starts at the front of its own block (the caller's is the first).
TEST(ThreadPool, blocks_give_each_thread_the_front_of_its_own_contiguous_block) {
  ThreadPool pool(3);
  const auto [caller, workers] =
      first_indices_of_three([&](const auto& fn) { pool.parallel_for_blocks(6, fn); });
  EXPECT_EQ(caller, 0);
  EXPECT_EQ(workers, (std::set<int64_t>{2, 4}));
}

// Given blocks (tensor/task_plan.h's shares): each thread starts at the front of the block it is
// given, not of an equal split by count (which would be 3 and 6).
TEST(ThreadPool, given_blocks_give_each_thread_the_front_of_the_block_it_was_given) {
  ThreadPool pool(3);
  const std::vector<int64_t> starts = {0, 5, 7};
  const auto [caller, workers] =
      first_indices_of_three([&](const auto& fn) { pool.parallel_for_blocks(9, starts, fn); });
  EXPECT_EQ(caller, 0);
  EXPECT_EQ(workers, (std::set<int64_t>{5, 7}));
}

// Given blocks of any shape, fewer than the threads or empty ones among them: every index once.
TEST(ThreadPool, given_blocks_cover_every_index_exactly_once) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    const std::vector<std::vector<int64_t>> shapes = {
        {0}, {0, 0}, {0, 1}, {0, 6, 6}, {0, 2, 3, 11}};
    for (const auto& starts : shapes) {
      const int64_t n = 12;
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int round = 0; round < 20; ++round) {
        pool.parallel_for_blocks(n, starts, [&](int64_t b, int64_t e) {
          ASSERT_EQ(e, b + 1);
          hits[static_cast<size_t>(b)].fetch_add(1);
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 20) << i;
    }
  }
}

// A thread held inside its block does not hold the others up: the caller, done with its own
// block, takes the held worker's last index (from the back) while the worker is still held, and
// the worker is released only once the caller has run it. Without taking from another's block
// the caller would wait for the worker, which waits for the caller (the bounded wait times out).
TEST(ThreadPool, blocks_let_a_free_thread_take_the_back_of_a_held_threads_block) {
  ThreadPool pool(2);
  const auto caller = std::this_thread::get_id();
  std::mutex mu;
  std::condition_variable cv;
  std::map<int64_t, std::thread::id> ran_on;
  pool.parallel_for_blocks(4, [&](int64_t b, int64_t) {  // blocks [0, 2) and [2, 4)
    std::unique_lock lk(mu);
    ran_on[b] = std::this_thread::get_id();
    cv.notify_all();
    if (std::this_thread::get_id() != caller) {
      cv.wait_for(lk, std::chrono::seconds(10), [&] { return ran_on.count(3) > 0; });
    }
  });
  ASSERT_EQ(ran_on.size(), 4u);
  EXPECT_EQ(ran_on[0], caller);
  EXPECT_EQ(ran_on[1], caller);
  EXPECT_EQ(ran_on[3], caller) << "the caller took the back of the worker's block";
}

}  // namespace
}  // namespace ember::tensor
