// Helpers shared by the engine tests: a Gate that a hook blocks on (so tests stop the engine
// at an exact site without sleeps), draining a stream, deterministic prompts, and real CPU
// backends on fixture models.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "engine/engine.h"
#include "fixture/fixture.h"
#include "gguf/reader.h"
#include "model/backend.h"

namespace ember::engine::testing {

// A one-shot barrier: the engine thread (in a hook) calls arrive_and_wait(); the test thread
// waits for it with wait_arrived(), acts (cancel, shutdown), then release()s it.
class Gate {
 public:
  void arrive_and_wait() {
    std::unique_lock lk(mu_);
    arrived_ = true;
    cv_.notify_all();
    cv_.wait(lk, [&] { return released_; });
  }
  void wait_arrived() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return arrived_; });
  }
  void release() {
    std::lock_guard lk(mu_);
    released_ = true;
    cv_.notify_all();
  }
  bool arrived() {
    std::lock_guard lk(mu_);
    return arrived_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool arrived_ = false;
  bool released_ = false;
};

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<TokenEvent> events;
  DoneEvent done;
  int n_done = 0;
};

// Reads a stream to its end (exactly one DoneEvent, then nullopt).
inline Collected drain(EventStream& s) {
  Collected c;
  while (auto ev = s.next()) {
    if (auto* t = std::get_if<TokenEvent>(&*ev)) {
      EXPECT_EQ(c.n_done, 0) << "token after the DoneEvent";
      c.tokens.push_back(t->id);
      c.events.push_back(*t);
    } else {
      c.done = std::get<DoneEvent>(*ev);
      c.n_done++;
    }
  }
  EXPECT_EQ(c.n_done, 1) << "every request ends with exactly one DoneEvent";
  return c;
}

inline std::vector<int32_t> make_prompt(int32_t n, int32_t n_vocab, uint32_t salt = 0) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  uint32_t x = 2463534242u + salt * 7919u;
  for (auto& t : p) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    t = int32_t(x % uint32_t(n_vocab));
  }
  return p;
}

inline GenerateRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.f;
  return r;
}

inline std::shared_ptr<EventStream> submit_ok(Engine& e, GenerateRequest r) {
  SubmitResult s = e.submit(std::move(r));
  EXPECT_TRUE(s.ok()) << (s.error ? s.error->message : "");
  return s.stream;
}

using SteadyClock = std::chrono::steady_clock;

// The engine must release a stopped request within this bound, measured from the cancel or
// shutdown signal while the engine thread is blocked in a test hook. It bounds control-plane
// release (poll sites, re-poll, finish, event delivery) — NOT the wall time of one prefill chunk
// or decode step on a big model, which is the residual window documented in engine.h.
constexpr auto kReleaseBound = std::chrono::seconds(2);

// The CPU backend on a GGUF file, or null (with a test failure).
inline std::shared_ptr<model::Backend> load_backend(const std::string& path, int32_t n_ctx = 2048) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  if (!f.ok()) return nullptr;
  auto file = std::make_shared<const gguf::File>(std::move(f).value());
  auto b = model::load_cpu_model(file, {.n_threads = 2, .n_ctx = n_ctx});
  EXPECT_TRUE(b.ok()) << b.message();
  if (!b.ok()) return nullptr;
  return std::shared_ptr<model::Backend>(std::move(b).value());
}

// A small gemma3 fixture: five sliding-window layers (window 128) and one global, written to
// the test's temp dir as `name`.gguf; returns its path.
inline std::string gemma3_fixture(const std::string& name) {
  fixture::FixtureSpec spec;
  spec.arch = "gemma3";
  spec.n_layer = 6;
  const std::string path = ::testing::TempDir() + "/ember_" + name + ".gguf";
  EXPECT_TRUE(fixture::write_fixture(spec, path).ok());
  return path;
}

}  // namespace ember::engine::testing
