#include "base/settings.h"

#include <gtest/gtest.h>

namespace ember::settings {
namespace {

struct Demo {
  int32_t threads = 0;
  double drain_s = 30;
  std::string key;
  std::vector<std::string> names;
  bool verbose = false;
  std::string kind = "a";
};

const Table<Demo>& demo_table() {
  static const auto t = [] {
    Table<Demo> t;
    t.add("-t,--threads", &Demo::threads, "DEMO_THREADS", "threads").range(0, 64);
    t.add("--drain", &Demo::drain_s, "DEMO_DRAIN", "seconds").at_least(0);
    t.add("--key", &Demo::key, "", "secret").redact();
    t.add("--name", &Demo::names, "", "names");
    t.add("--verbose", &Demo::verbose, "", "chatty").hide();
    t.add("--kind", &Demo::kind, "", "one of a few").one_of({"a", "b"});
    return t;
  }();
  return t;
}

TEST(Settings, the_long_flag_is_the_key) {
  EXPECT_EQ(key_of("-t,--threads"), "threads");
  EXPECT_EQ(key_of("--engine-drain"), "engine-drain");
  ASSERT_NE(demo_table().find("threads"), nullptr);
  EXPECT_EQ(demo_table().find("threads")->env, "DEMO_THREADS");
}

TEST(Settings, set_parses_and_validates_naming_the_flag) {
  Demo d;
  ASSERT_TRUE(demo_table().set(d, "threads", "8").ok());
  EXPECT_EQ(d.threads, 8);
  auto bad = demo_table().set(d, "threads", "99");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.message(), "--threads: 99 is out of range [0, 64]");
  EXPECT_EQ(d.threads, 8);  // unchanged
  EXPECT_EQ(demo_table().set(d, "threads", "8x").message(), "--threads: '8x' is not an integer");
  EXPECT_EQ(demo_table().set(d, "drain", "-1").message(), "--drain: -1 is out of range [0, inf]");
  EXPECT_EQ(demo_table().set(d, "nope", "1").message(), "unknown setting 'nope'");
}

TEST(Settings, validate_checks_values_set_directly) {
  Demo d;
  d.threads = -3;
  EXPECT_EQ(demo_table().validate(d).message(), "--threads: -3 is out of range [0, 64]");
  d.threads = 0;
  d.kind = "c";
  EXPECT_EQ(demo_table().validate(d).message(), "--kind: 'c' is not one of a, b");
}

TEST(Settings, a_string_with_choices_takes_only_those) {
  Demo d;
  ASSERT_TRUE(demo_table().set(d, "kind", "b").ok());
  EXPECT_EQ(d.kind, "b");
  EXPECT_EQ(demo_table().set(d, "kind", "B").message(), "--kind: 'B' is not one of a, b");
  EXPECT_EQ(d.kind, "b");  // unchanged
  ASSERT_TRUE(demo_table().set(d, "key", "anything").ok()) << "no choices: any string";
}

TEST(Settings, dump_and_apply_round_trip_every_field) {
  Demo a;
  a.threads = 3;
  a.drain_s = 0.25;
  a.key = "k";
  a.names = {"x", "y"};
  a.verbose = true;
  Demo b;
  ASSERT_TRUE(demo_table().apply(b, demo_table().dump(a)).ok());
  EXPECT_EQ(b.threads, 3);
  EXPECT_EQ(b.drain_s, 0.25);
  EXPECT_EQ(b.key, "k");
  EXPECT_EQ(b.names, (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(b.verbose);
}

TEST(Settings, describe_redacts_secrets_and_leaves_out_hidden_fields) {
  Demo d;
  d.key = "hunter2";
  std::string s = demo_table().describe(d);
  EXPECT_EQ(s, "threads=0 drain=30 key=(set) name= kind=a");
}

}  // namespace
}  // namespace ember::settings
