// The engine options of an engine built without settings (engine::EngineOptions' own
// initializers: tests, `ember run`, `ember bench`) are the engine settings table's defaults.
#include "worker/engine_settings.h"

#include <gtest/gtest.h>

namespace ember::worker {
namespace {

TEST(EngineSettings, engine_options_defaults_are_the_tables) {
  const engine::EngineOptions plain;
  const engine::EngineOptions from_table = engine_options(EngineSettings{});
  EXPECT_EQ(plain.max_sequences, from_table.max_sequences);
  EXPECT_EQ(plain.max_queued, from_table.max_queued);
  EXPECT_EQ(plain.prefill_chunk, from_table.prefill_chunk);
  EXPECT_EQ(plain.event_queue_capacity, from_table.event_queue_capacity);
  EXPECT_EQ(plain.warm.max_bytes, from_table.warm.max_bytes);
  // The prefix cache and the warm state are off without settings, on by the table's defaults
  // (a server's): the one intended difference.
  EXPECT_EQ(plain.prefix_cache_bytes, 0);
  EXPECT_EQ(from_table.prefix_cache_bytes, EngineSettings{}.kv_cache_bytes);
  EXPECT_EQ(plain.warm.dir, from_table.warm.dir);
}

TEST(EngineSettings, engine_options_carry_every_engine_setting) {
  EngineSettings s;
  s.max_sequences = 3;
  s.max_queued = 5;
  s.prefill_chunk = 7;
  s.event_queue_capacity = 11;
  s.kv_cache_bytes = 13;
  s.warm_cache_dir = "/w";
  s.warm_cache_bytes = 17;
  const engine::EngineOptions o = engine_options(s);
  EXPECT_EQ(o.max_sequences, 3);
  EXPECT_EQ(o.max_queued, 5);
  EXPECT_EQ(o.prefill_chunk, 7);
  EXPECT_EQ(o.event_queue_capacity, 11);
  EXPECT_EQ(o.prefix_cache_bytes, 13);
  EXPECT_EQ(o.warm.dir, "/w");
  EXPECT_EQ(o.warm.max_bytes, 17);
}

}  // namespace
}  // namespace ember::worker
