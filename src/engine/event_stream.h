// The bounded per-request event queue behind EventStream (engine-internal).
//
// Invariants: the engine side never blocks (push_token fails instead when `capacity` tokens
// are already waiting); the DoneEvent always fits (it does not count against the capacity), so
// every request's terminal event is delivered even to a consumer that fell behind; after the
// DoneEvent is taken, next() returns nullopt. When the consumer drops its last handle,
// consumer_gone() turns true and the engine cancels the request (cause: client).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "engine/engine.h"

namespace ember::engine {

class EventChannel {
 public:
  EventChannel(uint64_t id, int32_t capacity) : id_(id), capacity_(capacity) {}

  uint64_t id() const { return id_; }
  // Engine side. False (and nothing queued) when the consumer is `capacity` tokens behind.
  bool push_token(TokenEvent ev);
  void push_done(DoneEvent ev);
  bool consumer_gone() const { return gone_.load(std::memory_order_acquire); }

  // Consumer side.
  std::optional<Event> next();
  std::optional<Event> try_next();
  void set_waker(std::function<void()> waker);
  void mark_consumer_gone() { gone_.store(true, std::memory_order_release); }

 private:
  std::optional<Event> pop_locked();
  void wake();

  const uint64_t id_;
  const int32_t capacity_;
  std::atomic<bool> gone_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> q_;
  int32_t tokens_waiting_ = 0;
  bool done_taken_ = false;
  std::function<void()> waker_;
};

// What submit() hands out. Dropping the last copy tells the engine nobody is listening.
class StreamHandle final : public EventStream {
 public:
  explicit StreamHandle(std::shared_ptr<EventChannel> ch) : ch_(std::move(ch)) {}
  ~StreamHandle() override { ch_->mark_consumer_gone(); }
  uint64_t id() const override { return ch_->id(); }
  std::optional<Event> next() override { return ch_->next(); }
  std::optional<Event> try_next() override { return ch_->try_next(); }
  void set_waker(std::function<void()> waker) override { ch_->set_waker(std::move(waker)); }

 private:
  std::shared_ptr<EventChannel> ch_;
};

}  // namespace ember::engine
