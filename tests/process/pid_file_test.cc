#include "process/pid_file.h"

#include <gtest/gtest.h>
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

TEST_F(PidFileTest, create_writes_our_pid_and_removes_it_at_exit) {
  auto path = (dir / "ember.pid").string();
  {
    auto f = PidFile::create(path);
    ASSERT_TRUE(f.ok()) << f.message();
    EXPECT_EQ(*read_file(path), fmt::format("{}\n", ::getpid()));
  }
  EXPECT_FALSE(fs::exists(path));
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

TEST_F(PidFileTest, a_live_ember_owns_the_file) {
  // A program named ember: a copy of sleep.
  auto fake = dir / "ember";
  fs::copy_file("/bin/sleep", fake);
  auto c = Child::spawn({{fake.string(), "30"}});
  ASSERT_TRUE(c.ok());
  auto path = (dir / "ember.pid").string();
  write(path, fmt::format("{}\n", (*c)->pid()));
  auto info = inspect_pid_file(path);
  EXPECT_EQ(info.state, PidState::Running) << info.detail;
  EXPECT_EQ(info.pid, (*c)->pid());
  auto f = PidFile::create(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.message().find("already running"), std::string::npos) << f.message();
}

TEST_F(PidFileTest, garbage_and_missing_files_are_reported) {
  auto path = (dir / "ember.pid").string();
  EXPECT_EQ(inspect_pid_file(path).state, PidState::Missing);
  write(path, "not a pid\n");
  EXPECT_EQ(inspect_pid_file(path).state, PidState::Invalid);
}

}  // namespace
}  // namespace ember::process
