#include "process/child.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>

namespace ember::process {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<Child> sh(const std::string& script) {
  auto c = Child::spawn({{"/bin/sh", "-c", script}});
  EXPECT_TRUE(c.ok()) << c.message();
  return std::move(*c);
}

std::string read_all(int fd) {
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

TEST(Child, runs_in_its_own_process_group) {
  auto c = sh("cat >/dev/null");
  EXPECT_EQ(getpgid(c->pid()), c->pid());
  EXPECT_NE(getpgid(c->pid()), getpgrp());
  c->close_stdin();
  auto st = c->wait_for(10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->code(), 0);
}

TEST(Child, stdin_and_stdout_are_pipes_to_the_parent) {
  auto c = sh("tr a-z A-Z");
  std::string msg = "hello\n";
  ASSERT_TRUE(c->write_stdin({reinterpret_cast<const uint8_t*>(msg.data()), msg.size()}).ok());
  c->close_stdin();
  EXPECT_EQ(read_all(c->stdout_fd()), "HELLO\n");
  EXPECT_FALSE(c->write_stdin({reinterpret_cast<const uint8_t*>(msg.data()), 1}).ok());
}

TEST(Child, ignored_signals_are_reset_to_default_in_the_child) {
  ::signal(SIGTERM, SIG_IGN);  // as a front that ignores a signal would pass on without the reset
  auto c = sh("sleep 30");
  ::signal(SIGTERM, SIG_DFL);
  c->signal_group(SIGTERM);
  auto st = c->wait_for(10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->signal(), SIGTERM) << st->describe();
}

TEST(Child, the_parents_descriptors_do_not_leak_into_the_child) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);  // no O_CLOEXEC: would be inherited without closefrom
  auto c = sh(fmt::format("test -e /proc/self/fd/{} && echo leaked || echo closed", p[1]));
  EXPECT_EQ(read_all(c->stdout_fd()), "closed\n");
  ::close(p[0]);
  ::close(p[1]);
}

TEST(Child, destroying_a_running_child_kills_its_group) {
  pid_t pid;
  {
    auto c = sh("sleep 30");
    pid = c->pid();
  }
  EXPECT_NE(::kill(pid, 0), 0);  // reaped: no such process
}

TEST(Child, exit_status_describes_signals) {
  auto c = sh("kill -9 $$");
  auto st = c->wait_for(10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_FALSE(c->signal_group(SIGTERM));  // reaped: never signalled again
}

TEST(Child, spawning_a_missing_program_is_an_error) {
  auto c = Child::spawn({{"/nonexistent/ember"}});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.message().find("/nonexistent/ember"), std::string::npos);
}

}  // namespace
}  // namespace ember::process
