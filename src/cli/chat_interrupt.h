// Ctrl-C for `ember run --chat`, as Ollama and llama-cli behave: SIGINT while an answer is
// being generated cancels that generation through its CancelToken (the engine stops at its next
// poll site) and the chat goes on; SIGINT while waiting for the user's line ends the chat.
//
// The signal handler only counts the signal and writes a byte to a self-pipe; a
// watcher thread reads the pipe and cancels the token of the generation in flight. SIGINT is
// blocked in every thread but the one that constructed ChatInterrupts (construct it before
// starting other threads, e.g. the engine), so the signal interrupts that thread's read(), which
// read_line() notices (the handler is installed without SA_RESTART).
// One instance per process; the destructor restores the previous handler.
// See docs/architecture.md, "Drain contract".
#pragma once

#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/cancel.h"

namespace ember::cli {

class ChatInterrupts {
 public:
  ChatInterrupts();
  ~ChatInterrupts();
  ChatInterrupts(const ChatInterrupts&) = delete;
  ChatInterrupts& operator=(const ChatInterrupts&) = delete;

  // Call on the constructing thread once the other threads exist: lets SIGINT reach it again.
  void unblock_here();
  // SIGINT from now on cancels `token` (until end_generation()).
  void begin_generation(engine::CancelToken token);
  // Returns whether a SIGINT cancelled the generation.
  bool end_generation();

  enum class LineStatus { Line, EndOfInput, Interrupted };
  // Reads one line from fd 0 (without the newline); Interrupted when SIGINT arrives meanwhile.
  LineStatus read_line(std::string* line);

 private:
  void watch();
  int pipe_[2] = {-1, -1};
  std::thread watcher_;
  std::mutex mu_;
  std::optional<engine::CancelToken> current_;  // guarded by mu_
  bool cancelled_ = false;                      // guarded by mu_
  uint64_t seen_ = 0;                           // SIGINTs already accounted for (reader thread)
  std::string pending_;                         // bytes read past the last line
};

}  // namespace ember::cli
