#include "process/signal_pipe.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <climits>

namespace ember::process {
namespace {

std::atomic<int> g_write_fd{-1};

extern "C" void on_signal(int signo) {
  int saved = errno;
  int fd = g_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    unsigned char b = static_cast<unsigned char>(signo);
    [[maybe_unused]] ssize_t n = ::write(fd, &b, 1);  // full pipe: the signal is already pending
  }
  errno = saved;
}

}  // namespace

Result<std::unique_ptr<SignalPipe>> SignalPipe::install(std::initializer_list<int> signals) {
  EMBER_ASSERT(g_write_fd.load() < 0);  // one at a time
  int p[2];
  if (pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) return fail("pipe: {}", strerror(errno));
  std::unique_ptr<SignalPipe> sp(new SignalPipe());
  sp->read_fd_ = p[0];
  sp->write_fd_ = p[1];
  g_write_fd.store(p[1]);
  for (int s : signals) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: blocking reads return EINTR
    if (sigaction(s, &sa, nullptr) != 0) return fail("sigaction({}): {}", s, strerror(errno));
    sp->signals_.push_back(s);
  }
  return sp;
}

SignalPipe::~SignalPipe() {
  for (int s : signals_) ::signal(s, SIG_DFL);
  g_write_fd.store(-1);
  ::close(read_fd_);
  ::close(write_fd_);
}

std::optional<int> SignalPipe::wait(std::optional<std::chrono::milliseconds> timeout) {
  for (;;) {
    unsigned char b;
    ssize_t n = ::read(read_fd_, &b, 1);
    if (n == 1) return static_cast<int>(b);
    if (n < 0 && errno == EINTR) continue;
    if (timeout && timeout->count() <= 0) return std::nullopt;
    pollfd p{read_fd_, POLLIN, 0};
    int ms = timeout ? static_cast<int>(std::min<int64_t>(timeout->count(), INT_MAX)) : -1;
    int r = ::poll(&p, 1, ms);
    if (r == 0) return std::nullopt;  // timed out
    if (r < 0 && errno != EINTR) return std::nullopt;
    // readable (or interrupted by the very signal we wait for): read again, without waiting
    if (r < 0) continue;
    timeout = std::chrono::milliseconds(0);
  }
}

}  // namespace ember::process
