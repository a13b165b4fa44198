#include "engine/cancel.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace ember::engine {
namespace {

TEST(CancelToken, default_constructed_is_never_and_cannot_be_cancelled) {
  CancelToken t;
  EXPECT_FALSE(t.can_cancel());
  t.cancel();
  EXPECT_FALSE(t.is_cancelled());
  EXPECT_FALSE(t.peek_cancelled());
  EXPECT_EQ(t.polls(), 0u) << "never() holds no state, so it counts nothing";
}

TEST(CancelToken, never_holds_nothing_and_ignores_cancel) {
  CancelToken t = CancelToken::never();
  EXPECT_FALSE(t.can_cancel());
  t.cancel();
  t.cancel();
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(t.is_cancelled());
  EXPECT_EQ(t.polls(), 0u);
}

TEST(CancelToken, make_is_live_until_cancelled) {
  CancelToken t = CancelToken::make();
  EXPECT_TRUE(t.can_cancel());
  for (int i = 0; i < 10000; ++i) ASSERT_FALSE(t.is_cancelled()) << "poll " << i;
  t.cancel();
  EXPECT_TRUE(t.is_cancelled());
  EXPECT_TRUE(t.peek_cancelled());
}

TEST(CancelToken, cancel_is_idempotent) {
  CancelToken t = CancelToken::make();
  t.cancel();
  t.cancel();
  EXPECT_TRUE(t.is_cancelled());
  EXPECT_TRUE(t.is_cancelled()) << "stays cancelled";
}

TEST(CancelToken, copies_share_state_both_ways) {
  CancelToken a = CancelToken::make();
  CancelToken b = a;
  CancelToken c;
  c = b;
  EXPECT_FALSE(a.peek_cancelled());
  c.cancel();
  EXPECT_TRUE(a.peek_cancelled());
  EXPECT_TRUE(b.peek_cancelled());
  (void)a.is_cancelled();
  (void)b.is_cancelled();
  EXPECT_EQ(c.polls(), 2u) << "polls through any copy are counted on the shared state";
}

TEST(CancelToken, polls_counts_only_is_cancelled_not_peek) {
  CancelToken t = CancelToken::make();
  EXPECT_EQ(t.polls(), 0u);
  (void)t.is_cancelled();
  (void)t.is_cancelled();
  EXPECT_EQ(t.polls(), 2u);
  (void)t.peek_cancelled();
  (void)t.budget_exhausted();
  EXPECT_EQ(t.polls(), 2u);
}

TEST(CancelToken, budget_of_n_permits_exactly_n_polls) {
  CancelToken t = CancelToken::with_budget(3);
  EXPECT_FALSE(t.is_cancelled());
  EXPECT_FALSE(t.is_cancelled());
  EXPECT_FALSE(t.is_cancelled());
  EXPECT_FALSE(t.budget_exhausted());
  EXPECT_TRUE(t.is_cancelled()) << "the 3rd poll (0-based) reports cancelled";
  EXPECT_TRUE(t.is_cancelled()) << "and it stays cancelled";
  EXPECT_TRUE(t.budget_exhausted());
  EXPECT_EQ(t.polls(), 5u);
}

TEST(CancelToken, budget_of_zero_permits_nothing) {
  CancelToken t = CancelToken::with_budget(0);
  EXPECT_TRUE(t.is_cancelled());
}

TEST(CancelToken, peek_does_not_spend_budget_and_reports_only_cancel) {
  CancelToken t = CancelToken::with_budget(1);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(t.peek_cancelled());
  EXPECT_FALSE(t.is_cancelled()) << "peeks did not spend the budget";
  EXPECT_TRUE(t.is_cancelled());
  EXPECT_FALSE(t.peek_cancelled()) << "a spent budget is not a cancel() call";
  t.cancel();
  EXPECT_TRUE(t.peek_cancelled());
}

TEST(CancelToken, budget_is_shared_by_copies) {
  CancelToken a = CancelToken::with_budget(2);
  CancelToken b = a;
  EXPECT_FALSE(a.is_cancelled());
  EXPECT_FALSE(b.is_cancelled());
  EXPECT_TRUE(a.is_cancelled());
  EXPECT_TRUE(b.budget_exhausted());
}

TEST(CancelToken, cancel_from_another_thread_is_seen) {
  CancelToken t = CancelToken::make();
  std::thread th([c = t] { c.cancel(); });
  th.join();
  EXPECT_TRUE(t.is_cancelled());
}

TEST(CancelToken, concurrent_polls_are_all_counted) {
  CancelToken t = CancelToken::make();
  std::vector<std::thread> ths;
  for (int i = 0; i < 4; ++i) {
    ths.emplace_back([t] {
      for (int j = 0; j < 1000; ++j) (void)t.is_cancelled();
      t.cancel();
    });
  }
  for (auto& th : ths) th.join();
  EXPECT_EQ(t.polls(), 4000u);
  EXPECT_TRUE(t.peek_cancelled());
}

TEST(CancelOnDrop, cancels_on_destruction_when_armed) {
  CancelToken t = CancelToken::make();
  {
    CancelOnDrop g = t.cancel_on_drop();
    EXPECT_TRUE(g.armed());
    EXPECT_FALSE(t.peek_cancelled()) << "not while the guard lives";
  }
  EXPECT_TRUE(t.peek_cancelled());
}

TEST(CancelOnDrop, disarmed_guard_does_not_cancel) {
  CancelToken t = CancelToken::make();
  {
    CancelOnDrop g = t.cancel_on_drop();
    g.disarm();
  }
  EXPECT_FALSE(t.peek_cancelled());
}

TEST(CancelOnDrop, exposes_the_token_it_will_cancel) {
  CancelToken t = CancelToken::make();
  auto g = std::make_unique<CancelOnDrop>(t.cancel_on_drop());
  EXPECT_FALSE(g->token().peek_cancelled());
  g.reset();
  EXPECT_TRUE(t.peek_cancelled());
}

TEST(CancelOnDrop, moved_guard_cancels_once_from_its_new_owner) {
  CancelToken t = CancelToken::make();
  std::unique_ptr<CancelOnDrop> outer;
  {
    CancelOnDrop g = t.cancel_on_drop();
    outer = std::make_unique<CancelOnDrop>(std::move(g));
    EXPECT_FALSE(g.armed())
        << "the moved-from guard is disarmed";  // NOLINT(bugprone-use-after-move)
  }
  EXPECT_FALSE(t.peek_cancelled()) << "destroying the moved-from guard did nothing";
  EXPECT_TRUE(outer->armed());
  outer.reset();
  EXPECT_TRUE(t.peek_cancelled());
}

TEST(CancelOnDrop, move_assignment_fires_the_replaced_armed_guard) {
  CancelToken a = CancelToken::make();
  CancelToken b = CancelToken::make();
  CancelOnDrop ga = a.cancel_on_drop();
  CancelOnDrop gb = b.cancel_on_drop();
  ga = std::move(gb);
  EXPECT_TRUE(a.peek_cancelled()) << "forgetting a guard errs on the side of cancelling";
  EXPECT_FALSE(b.peek_cancelled());
  ga.disarm();
}

TEST(CancelOnDrop, forgetting_to_disarm_one_of_two_guards_still_cancels) {
  CancelToken t = CancelToken::make();
  CancelOnDrop kept = t.cancel_on_drop();
  { CancelOnDrop other = t.cancel_on_drop(); }
  EXPECT_TRUE(t.peek_cancelled());
  kept.disarm();
}

TEST(CancelOnDrop, guard_on_never_token_is_harmless) {
  CancelToken t;
  { CancelOnDrop g = t.cancel_on_drop(); }
  EXPECT_FALSE(t.is_cancelled());
}

}  // namespace
}  // namespace ember::engine
