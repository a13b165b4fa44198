#include "process/signal_pipe.h"

#include <errno.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace ember::process {
namespace {

using namespace std::chrono_literals;

TEST(SignalPipe, a_raised_signal_is_read_from_the_pipe) {
  auto sp = SignalPipe::install({SIGUSR1, SIGUSR2});
  ASSERT_TRUE(sp.ok());
  EXPECT_FALSE((*sp)->try_take());
  ::raise(SIGUSR2);
  ::raise(SIGUSR1);
  EXPECT_EQ((*sp)->wait(1s), SIGUSR2);
  EXPECT_EQ((*sp)->wait(1s), SIGUSR1);
  EXPECT_FALSE((*sp)->wait(10ms));
}

TEST(SignalPipe, a_blocking_read_is_interrupted_not_restarted) {
  auto sp = SignalPipe::install({SIGUSR1});
  ASSERT_TRUE(sp.ok());
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  std::atomic<int> err{0};
  std::atomic<bool> reading{false};
  std::thread reader([&] {
    char b;
    reading = true;
    ssize_t n = ::read(p[0], &b, 1);  // blocks: nobody writes until the fallback below
    err = n < 0 ? errno : 0;
  });
  while (!reading) std::this_thread::yield();
  // Signal until the read returns (the first signal may land just before the read blocks);
  // with SA_RESTART the read would resume and only the fallback write would end it.
  for (int i = 0; i < 200 && err == 0; ++i) {
    pthread_kill(reader.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(10ms);
    if (i == 199) [[maybe_unused]]
      auto w = ::write(p[1], "x", 1);
  }
  reader.join();
  EXPECT_EQ(err.load(), EINTR);
  EXPECT_EQ((*sp)->wait(1s), SIGUSR1);
  ::close(p[0]);
  ::close(p[1]);
}

}  // namespace
}  // namespace ember::process
