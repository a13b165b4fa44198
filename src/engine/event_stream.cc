#include "engine/event_stream.h"

namespace ember::engine {

bool EventChannel::push_token(TokenEvent ev) {
  {
    std::lock_guard lk(mu_);
    if (tokens_waiting_ >= capacity_) return false;
    q_.emplace_back(std::move(ev));
    ++tokens_waiting_;
  }
  cv_.notify_one();
  wake();
  return true;
}

void EventChannel::push_done(DoneEvent ev) {
  {
    std::lock_guard lk(mu_);
    q_.emplace_back(std::move(ev));
  }
  cv_.notify_all();
  wake();
}

void EventChannel::wake() {
  std::function<void()> w;
  {
    std::lock_guard lk(mu_);
    w = waker_;
  }
  // Called outside the lock: a waker may well call try_next() right away.
  if (w) w();
}

std::optional<Event> EventChannel::pop_locked() {
  if (q_.empty()) return std::nullopt;
  Event ev = std::move(q_.front());
  q_.pop_front();
  if (std::holds_alternative<TokenEvent>(ev)) {
    --tokens_waiting_;
  } else {
    done_taken_ = true;
  }
  return ev;
}

std::optional<Event> EventChannel::next() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return !q_.empty() || done_taken_; });
  return pop_locked();
}

std::optional<Event> EventChannel::try_next() {
  std::lock_guard lk(mu_);
  return pop_locked();
}

void EventChannel::set_waker(std::function<void()> waker) {
  std::lock_guard lk(mu_);
  waker_ = std::move(waker);
}

}  // namespace ember::engine
