#include "process/pid_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "base/file.h"
#include "process/child.h"

namespace ember::process {
namespace {

namespace fs = std::filesystem;

struct PidFileTest : ::testing::Test {
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() / fmt::format("ember-pid-{}", ::getpid());
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  void write(const fs::path& p, const std::string& s) {
    ASSERT_TRUE(write_file_atomic(p, {reinterpret_cast<const uint8_t*>(s.data()), s.size()}).ok());
  }
};

TEST_F(PidFileTest, create_writes_our_pid_and_start_time_and_removes_it_at_exit) {
  auto path = (dir / "ember.pid").string();
  {
    auto f = PidFile::create(path);
    ASSERT_TRUE(f.ok()) << f.message();
    auto start = process_start_time(::getpid());
    ASSERT_TRUE(start.has_value());
    auto boot = read_file("/proc/sys/kernel/random/boot_id");
    ASSERT_TRUE(boot.ok());
    EXPECT_EQ(*read_file(path), fmt::format("{}\nstart_time {}\nboot_id {}", ::getpid(), *start,
                                            *boot));  // boot_id ends in its own newline
    ASSERT_TRUE(f->set_port(4242).ok());
    EXPECT_TRUE(read_file(path)->ends_with("\nport 4242\n")) << *read_file(path);
    auto info = inspect_pid_file(path);
    EXPECT_EQ(info.pid, ::getpid());
    EXPECT_EQ(info.port, 4242);
    EXPECT_TRUE(info.identity_known);
  }
  EXPECT_FALSE(fs::exists(path));
}

// A binary named ember (a copy of sleep) running for the test.
struct FakeEmber {
  std::unique_ptr<Child> child;
  explicit FakeEmber(const fs::path& dir, const std::string& name = "ember") {
    auto fake = dir / name;
    if (!fs::exists(fake)) fs::copy_file("/bin/sleep", fake);
    auto c = Child::spawn({{fake.string(), "30"}});
    EXPECT_TRUE(c.ok());
    if (c.ok()) child = std::move(*c);
  }
  pid_t pid() const { return child->pid(); }
};

TEST_F(PidFileTest, start_time_is_field_22_even_when_the_name_holds_spaces_and_parens) {
  FakeEmber odd(dir, "a) 1 2 3 (b");
  ASSERT_TRUE(odd.child);
  auto mine = process_start_time(::getpid());
  auto theirs = process_start_time(odd.pid());
  ASSERT_TRUE(mine && theirs);
  // The child started after this process, and not before boot + a day of ticks ago.
  EXPECT_GE(*theirs, *mine);
  EXPECT_LT(*theirs - *mine, 86400u * static_cast<uint64_t>(::sysconf(_SC_CLK_TCK)));
  EXPECT_FALSE(process_start_time(0).has_value());
}

TEST_F(PidFileTest, an_ember_that_did_not_write_the_file_is_not_trusted) {
  // The file's writer is gone and its pid now belongs to another ember (another server, or an
  // engine worker): the pid and the name match, the start time does not.
  FakeEmber other(dir);
  ASSERT_TRUE(other.child);
  auto start = process_start_time(other.pid());
  ASSERT_TRUE(start.has_value());
  auto path = (dir / "ember.pid").string();
  write(path, fmt::format("{}\nstart_time {}\n", other.pid(), *start - 1));
  auto info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::NotWriter);
  EXPECT_NE(info.detail.find(fmt::format("pid {} is not the server that wrote it (start time {} "
                                         "differs from the recorded {})",
                                         other.pid(), *start, *start - 1)),
            std::string::npos)
      << info.detail;
  auto pinned = PinnedProcess::pin(path);
  ASSERT_FALSE(pinned.ok());
  EXPECT_NE(pinned.message().find("not the server that wrote it"), std::string::npos);
  EXPECT_TRUE(PidFile::create(path).ok());  // stale: replaced

  // The same from before the last boot.
  write(path, fmt::format("{}\nstart_time {}\nboot_id not-this-boot\n", other.pid(), *start));
  info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::NotWriter);
  EXPECT_NE(info.detail.find("before the last boot"), std::string::npos) << info.detail;
}

TEST_F(PidFileTest, the_writer_is_pinned_signalled_and_waited_for) {
  FakeEmber writer(dir);
  ASSERT_TRUE(writer.child);
  auto start = process_start_time(writer.pid());
  ASSERT_TRUE(start.has_value());
  auto path = (dir / "ember.pid").string();
  write(path,
        fmt::format("{}\nstart_time {}\nport 8080\nsome_future_key x\n", writer.pid(), *start));
  auto info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::Running) << info.detail;
  EXPECT_EQ(info.port, 8080);
  auto pinned = PinnedProcess::pin(path);
  ASSERT_TRUE(pinned.ok()) << pinned.message();
  EXPECT_EQ(pinned->pid(), writer.pid());
  EXPECT_FALSE(pinned->wait_gone(std::chrono::milliseconds(1)));
  ASSERT_TRUE(pinned->signal(SIGTERM).ok());
  EXPECT_TRUE(pinned->wait_gone(std::chrono::seconds(10)));
}

TEST_F(PidFileTest, an_oversized_file_is_not_read_as_a_pid_file) {
  auto path = (dir / "ember.pid").string();
  write(path, fmt::format("{}\n{}", ::getpid(), std::string(kMaxPidFileBytes, 'x')));
  auto info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::Invalid);
  EXPECT_NE(info.detail.find("more than a pid file's limit of 4096"), std::string::npos)
      << info.detail;
}

TEST_F(PidFileTest, a_dead_pid_is_stale) {
  auto path = (dir / "ember.pid").string();
  pid_t dead;
  {
    auto c = Child::spawn({{"/bin/true"}});
    ASSERT_TRUE(c.ok());
    dead = (*c)->pid();
    ASSERT_TRUE((*c)->wait_for(std::chrono::seconds(10)));
  }
  write(path, fmt::format("{}\n", dead));
  auto info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::Dead);
  EXPECT_NE(info.detail.find("stale"), std::string::npos);
  EXPECT_TRUE(PidFile::create(path).ok());  // replaced
}

TEST_F(PidFileTest, a_live_pid_that_is_not_ember_is_stale) {
  auto path = (dir / "ember.pid").string();
  write(path, fmt::format("{}\n", ::getpid()));  // this test binary is not ember
  EXPECT_EQ(inspect_pid_file(path).state, PidState::NotEmber);
}

TEST_F(PidFileTest, a_live_ember_owns_a_file_without_start_time) {
  // A file an older ember wrote (the pid alone): trusted by the process's name.
  FakeEmber c(dir);
  ASSERT_TRUE(c.child);
  auto path = (dir / "ember.pid").string();
  write(path, fmt::format("{}\n", c.pid()));
  auto info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::Running) << info.detail;
  EXPECT_EQ(info.pid, c.pid());
  EXPECT_FALSE(info.identity_known);
  auto f = PidFile::create(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("already running"), std::string::npos) << f.message();
}

TEST_F(PidFileTest, garbage_and_missing_files_are_reported) {
  auto path = (dir / "ember.pid").string();
  EXPECT_EQ(inspect_pid_file(path).state, PidState::Missing);
  write(path, "not a pid\n");
  EXPECT_EQ(inspect_pid_file(path).state, PidState::Invalid);
  write(path, fmt::format("{}\nstart_time soon\n", ::getpid()));
  EXPECT_EQ(inspect_pid_file(path).state, PidState::Invalid);
  write(path, fmt::format("{}\nport 70000\n", ::getpid()));
  EXPECT_EQ(inspect_pid_file(path).state, PidState::Invalid);
}

}  // namespace
}  // namespace ember::process
