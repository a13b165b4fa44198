#include "base/result.h"

#include <gtest/gtest.h>

namespace ember {
namespace {

Result<int> parse_positive(int v) {
  if (v <= 0) return fail("value {} is not positive", v);
  return v;
}

Result<int> doubled(int v) {
  EMBER_TRY(int x, parse_positive(v));
  return 2 * x;
}

TEST(Result, carries_value_or_error_message) {
  auto ok = parse_positive(3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 3);
  auto bad = parse_positive(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "value -1 is not positive");
}

TEST(Result, try_macro_propagates_the_first_error) {
  EXPECT_EQ(*doubled(4), 8);
  EXPECT_EQ(doubled(0).message(), "value 0 is not positive");
}

}  // namespace
}  // namespace ember
