#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace ember::server {
namespace {

// Feeds pieces one by one; returns everything emitted and whether it stopped.
std::pair<std::string, bool> run(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) {
    auto s = m.push(p);
    out += s.emit;
    if (s.stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopMatcher, without_stop_strings_everything_passes_through_at_once) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc").emit, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, stop_string_inside_one_piece_cuts_the_text_before_it) {
  StopMatcher m({"END"});
  auto s = m.push("hello END world");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emit, "hello ");
  EXPECT_EQ(m.push("more").emit, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, stop_string_split_across_tokens_matches_and_is_not_emitted) {
  StopMatcher m({"</answer>"});
  auto [out, stopped] = run(m, {"the ", "result<", "/ans", "wer>", "tail"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "the result");
}

TEST(StopMatcher, holds_back_only_a_possible_prefix_and_releases_it_when_ruled_out) {
  StopMatcher m({"STOP"});
  auto s = m.push("abcST");
  EXPECT_EQ(s.emit, "abc");  // "ST" could start "STOP"
  s = m.push("X");
  EXPECT_EQ(s.emit, "STX");  // ruled out
  EXPECT_FALSE(s.stopped);
}

TEST(StopMatcher, held_text_is_flushed_at_the_end_of_generation) {
  StopMatcher m({"\n\n"});
  auto [out, stopped] = run(m, {"line\n"});
  EXPECT_FALSE(stopped);
  EXPECT_EQ(out, "line\n");
}

TEST(StopMatcher, earliest_of_several_stop_strings_wins) {
  StopMatcher m({"world", "lo w"});
  auto s = m.push("hello world");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.emit, "hel");
}

TEST(StopMatcher, emitted_text_never_splits_a_utf8_character) {
  StopMatcher m({"é!"});  // U+00E9 is two bytes
  auto s = m.push("café");
  EXPECT_EQ(s.emit, "caf");  // the whole "é" is held back
  s = m.push("?");
  EXPECT_EQ(s.emit, "é?");
}

TEST(StopMatcher, stop_string_at_the_very_start_emits_nothing) {
  StopMatcher m({"###"});
  auto [out, stopped] = run(m, {"#", "#", "#", "x"});
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace ember::server

namespace ember::server {
namespace {

TEST(StopMatcher, names_the_stop_string_that_matched_earliest) {
  StopMatcher m({"zzz", "END", "x"});
  EXPECT_EQ(m.matched(), "");
  EXPECT_TRUE(m.push("ab EN").emit == "ab ");
  auto s = m.push("D then x");
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(m.matched(), "END");
}

}  // namespace
}  // namespace ember::server
