#include "process/fd_limit.h"

#include <gtest/gtest.h>

namespace ember::process {
namespace {

TEST(FdLimit, the_soft_limit_is_raised_to_the_hard_limit) {
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  FdLimit r = raise_fd_limit();
  rlimit now{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &now), 0);
  EXPECT_TRUE(r.error.empty()) << r.error;
  EXPECT_EQ(r.before, 64u);
  EXPECT_EQ(r.after, now.rlim_cur);
  EXPECT_EQ(now.rlim_max, saved.rlim_max);  // the hard limit is untouched
  if (saved.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(now.rlim_cur, saved.rlim_max);
  }
  EXPECT_GT(now.rlim_cur, 64u);
  // Already at the hard limit: nothing changes.
  FdLimit again = raise_fd_limit();
  EXPECT_EQ(again.before, again.after);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
}

}  // namespace
}  // namespace ember::process
