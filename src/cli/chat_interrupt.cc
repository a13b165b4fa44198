#include "cli/chat_interrupt.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>

namespace ember::cli {
namespace {

std::atomic<uint64_t> g_sigints{0};
std::atomic<int> g_pipe_write{-1};
struct sigaction g_previous;

void on_sigint(int) {
  const int saved = errno;
  g_sigints.fetch_add(1, std::memory_order_relaxed);
  int fd = g_pipe_write.load(std::memory_order_relaxed);
  if (fd >= 0) {
    char b = 1;
    [[maybe_unused]] auto n = ::write(fd, &b, 1);
  }
  errno = saved;
}

void set_sigint_blocked(bool blocked) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  pthread_sigmask(blocked ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

}  // namespace

ChatInterrupts::ChatInterrupts() {
  if (::pipe(pipe_) != 0) pipe_[0] = pipe_[1] = -1;
  g_pipe_write.store(pipe_[1]);
  seen_ = g_sigints.load();
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocked read() must return EINTR
  ::sigaction(SIGINT, &sa, &g_previous);
  set_sigint_blocked(true);  // threads started from here on inherit the blocked mask
  watcher_ = std::thread([this] { watch(); });
}

ChatInterrupts::~ChatInterrupts() {
  g_pipe_write.store(-1);
  if (pipe_[1] >= 0) ::close(pipe_[1]);  // the watcher sees EOF and ends
  if (watcher_.joinable()) watcher_.join();
  if (pipe_[0] >= 0) ::close(pipe_[0]);
  ::sigaction(SIGINT, &g_previous, nullptr);
}

void ChatInterrupts::unblock_here() {
  set_sigint_blocked(false);
}

void ChatInterrupts::watch() {
  for (;;) {
    char b;
    ssize_t n = ::read(pipe_[0], &b, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    std::lock_guard lock(mu_);
    if (current_) {
      current_->cancel();
      cancelled_ = true;
    }
  }
}

void ChatInterrupts::begin_generation(engine::CancelToken token) {
  std::lock_guard lock(mu_);
  current_ = std::move(token);
  cancelled_ = false;
}

bool ChatInterrupts::end_generation() {
  std::lock_guard lock(mu_);
  current_.reset();
  // A Ctrl-C that stopped this answer must not also end the chat at the next prompt.
  seen_ = g_sigints.load();
  return cancelled_;
}

ChatInterrupts::LineStatus ChatInterrupts::read_line(std::string* line) {
  line->clear();
  for (;;) {
    if (auto nl = pending_.find('\n'); nl != std::string::npos) {
      *line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      return LineStatus::Line;
    }
    // SIGINT stays blocked between the check and the wait; ppoll unblocks it atomically, so a
    // Ctrl-C arriving in between is not lost until the next Enter.
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    if (g_sigints.load() != seen_) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      seen_ = g_sigints.load();
      return LineStatus::Interrupted;
    }
    sigset_t wait_mask = old;
    sigdelset(&wait_mask, SIGINT);
    pollfd p{0, POLLIN, 0};
    int r = ::ppoll(&p, 1, nullptr, &wait_mask);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (r < 0) {
      if (errno == EINTR) continue;  // the loop head tells a SIGINT from other signals
      return LineStatus::EndOfInput;
    }
    char buf[4096];
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (pending_.empty()) return LineStatus::EndOfInput;
      *line = std::move(pending_);  // a last line without a newline
      pending_.clear();
      return LineStatus::Line;
    }
    pending_.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace ember::cli
