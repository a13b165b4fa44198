// Signals through a self-pipe: the handler only writes the signal's number to
// a non-blocking pipe; a thread (or a poll loop) reads it and decides. Handlers are installed
// WITHOUT SA_RESTART, so a blocking read the stop depends on returns EINTR instead of silently
// resuming. One SignalPipe per process at a time; its destructor restores the default
// dispositions of the signals it took.
// See docs/architecture.md, "Drain contract".
#pragma once

#include <chrono>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "base/result.h"

namespace ember::process {

class SignalPipe {
 public:
  static Result<std::unique_ptr<SignalPipe>> install(std::initializer_list<int> signals);
  ~SignalPipe();
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  int fd() const { return read_fd_; }  // readable once a signal has arrived (for poll)
  // The next signal that arrived, waiting up to `timeout` (nullopt: forever). nullopt when
  // none arrived in time.
  std::optional<int> wait(std::optional<std::chrono::milliseconds> timeout);
  std::optional<int> try_take() { return wait(std::chrono::milliseconds(0)); }

 private:
  SignalPipe() = default;
  int read_fd_ = -1;
  int write_fd_ = -1;
  std::vector<int> signals_;
};

}  // namespace ember::process
