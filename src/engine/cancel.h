// CancelToken: the one cooperative stop signal shared by everyone who can stop a request (the
// HTTP handler, the engine's control plane, a deadline, a test).
// See docs/architecture.md, "Cancellation contract".
//
// Invariants:
// - A default-constructed token is never(): it holds nothing, every query is a null check, and
//   cancel() on it does nothing. Adding a CancelToken field to a struct changes no behaviour.
// - Copies share state: cancelling any copy is seen by all. cancel() is idempotent and safe
//   from any thread.
// - is_cancelled() is THE poll: it counts one poll (polls()) and spends one unit of a budget.
//   peek_cancelled() reads the cancel() flag without counting (for assertions and re-polls);
//   it does not report an exhausted budget, since only polls spend a budget.
// - with_budget(n) reports cancelled from its n-th poll on (0-based): polls 0..n-1 say "go",
//   so a loop that polls once per step runs exactly n steps; a budget of 0 permits none.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

namespace ember::engine {

class CancelOnDrop;

class CancelToken {
 public:
  CancelToken() = default;  // == never()

  static CancelToken never() { return CancelToken(); }
  static CancelToken make();
  static CancelToken with_budget(uint64_t n);

  // Idempotent; any thread. No effect on a never() token.
  // The first cancel() records when it happened (for the cancel-latency metric).
  void cancel() const {
    if (!s_) return;
    int64_t expected = 0;
    s_->cancelled_at_ns.compare_exchange_strong(expected, now_ns(), std::memory_order_relaxed);
    s_->cancelled.store(true, std::memory_order_release);
  }
  // When cancel() first ran; nullopt if it has not (or for never()).
  std::optional<std::chrono::steady_clock::time_point> cancelled_at() const {
    int64_t ns = s_ ? s_->cancelled_at_ns.load(std::memory_order_relaxed) : 0;
    if (ns == 0) return std::nullopt;
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(ns));
  }

  // Counts one poll. True once cancel() ran or the budget is spent.
  bool is_cancelled() const {
    if (!s_) return false;
    uint64_t seen = s_->polls.fetch_add(1, std::memory_order_relaxed);
    return s_->cancelled.load(std::memory_order_acquire) || seen >= s_->budget;
  }

  // Reads the cancel() flag without counting a poll or spending budget.
  bool peek_cancelled() const { return s_ && s_->cancelled.load(std::memory_order_acquire); }

  // True once a poll has reported the budget spent (and would again).
  bool budget_exhausted() const {
    return s_ && s_->budget != kNoBudget && s_->polls.load(std::memory_order_relaxed) > s_->budget;
  }

  // How many times is_cancelled() ran on this token or its copies; 0 for never().
  uint64_t polls() const { return s_ ? s_->polls.load(std::memory_order_relaxed) : 0; }

  // False for never(): nothing can cancel it.
  bool can_cancel() const { return s_ != nullptr; }

  // An armed guard that cancels this token when destroyed, unless disarmed first.
  [[nodiscard]] CancelOnDrop cancel_on_drop() const;

 private:
  static constexpr uint64_t kNoBudget = std::numeric_limits<uint64_t>::max();
  struct State {
    std::atomic<bool> cancelled{false};
    std::atomic<uint64_t> polls{0};
    uint64_t budget = kNoBudget;              // poll index from which polls report cancelled
    std::atomic<int64_t> cancelled_at_ns{0};  // steady_clock; 0: not cancelled
  };
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::shared_ptr<State> s_;
};

// Cancels its token on destruction unless disarm() ran. Armed by default so that forgetting to
// disarm errs on the side of cancelling: the HTTP handler holds one for the connection's life
// and disarms it only when the work completed or was handed to something else that can stop
// it. Move-only; a moved-from guard is disarmed.
class [[nodiscard]] CancelOnDrop {
 public:
  explicit CancelOnDrop(CancelToken token) : token_(std::move(token)), armed_(true) {}
  ~CancelOnDrop() {
    if (armed_) token_.cancel();
  }
  CancelOnDrop(CancelOnDrop&& o) noexcept : token_(o.token_), armed_(o.armed_) { o.armed_ = false; }
  CancelOnDrop& operator=(CancelOnDrop&& o) noexcept;
  CancelOnDrop(const CancelOnDrop&) = delete;
  CancelOnDrop& operator=(const CancelOnDrop&) = delete;

  void disarm() { armed_ = false; }
  bool armed() const { return armed_; }
  const CancelToken& token() const { return token_; }

 private:
  CancelToken token_;
  bool armed_;
};

}  // namespace ember::engine
