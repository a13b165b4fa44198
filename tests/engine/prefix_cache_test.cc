// PrefixCache on its own: the hash chain, longest-prefix lookup with verification, the byte
// budget, LRU weighted by hits, in-use blocks pinned, and the save order (parents first).
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <set>

#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"

namespace ember::engine {
namespace {

using testing::FakeBackend;

struct Fixture {
  FakeBackend fake{{.block_tokens = 4}};
  std::vector<model::KvBlockRef> blocks_of(const std::vector<int32_t>& toks) {
    auto seq = fake.new_sequence(256);
    std::vector<float> logits(64);
    model::ForwardItem it{seq.get(), toks, true};
    EXPECT_TRUE(fake.forward({&it, 1}, logits).ok());
    std::vector<model::KvBlockRef> out;
    for (int32_t i = 0; i * 4 + 4 <= int32_t(toks.size()); ++i) out.push_back(seq->block(i));
    return out;
  }
  // Inserts every full block of `toks` as one chain.
  void add(PrefixCache& c, const std::vector<int32_t>& toks) {
    auto bl = blocks_of(toks);
    uint64_t parent = c.root();
    for (size_t i = 0; i < bl.size(); ++i) {
      parent = c.insert(parent, int32_t(i), std::span(toks).subspan(i * 4, 4), bl[i]);
    }
  }
};

std::vector<int32_t> seq_of(int n, int32_t base) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(base + i % 50);
  return v;
}

TEST(PrefixCache, returns_the_longest_cached_prefix_up_to_the_limit) {
  Fixture f;
  PrefixCache c(f.fake.kv_layout(), 1 << 20);
  auto a = seq_of(16, 1);
  f.add(c, a);
  uint64_t key = 0;
  auto same = c.match(a, 10, key);
  EXPECT_EQ(same.size(), 4u);
  auto limited = c.match(a, 2, key);
  EXPECT_EQ(limited.size(), 2u);
  auto b = a;
  b[9] = 49;  // differs inside block 2
  EXPECT_EQ(c.match(b, 10, key).size(), 2u);
  auto other = seq_of(16, 7);
  EXPECT_TRUE(c.match(other, 10, key).empty());
  EXPECT_EQ(key, c.root());
  EXPECT_EQ(c.stats().lookups_hit, 3u);
  EXPECT_EQ(c.stats().lookups_miss, 1u);
  EXPECT_EQ(c.stats().cached_tokens, 16u + 8 + 8);
}

TEST(PrefixCache, a_block_is_found_only_after_its_own_parent) {
  Fixture f;
  PrefixCache c(f.fake.kv_layout(), 1 << 20);
  auto a = seq_of(8, 1);
  f.add(c, a);
  // Block 1 of `a` behind another first block: the chain key differs, so no hit.
  std::vector<int32_t> b = seq_of(4, 30);
  b.insert(b.end(), a.begin() + 4, a.end());
  uint64_t key = 0;
  EXPECT_TRUE(c.match(b, 2, key).empty());
  // Another context (another model) never sees these blocks.
  FakeBackend other({.block_tokens = 4, .context_key = 0xBAD});
  PrefixCache c2(other.kv_layout(), 1 << 20);
  EXPECT_NE(c2.root(), c.root());
  EXPECT_NE(PrefixCache::chain(c.root(), std::span(a).first(4)),
            PrefixCache::chain(c2.root(), std::span(a).first(4)));
}

TEST(PrefixCache, evicts_least_recently_used_weighted_by_hits_and_never_blocks_in_use) {
  Fixture f;
  const int64_t bb = f.fake.kv_layout().block_bytes;
  PrefixCache c(f.fake.kv_layout(), 3 * bb);
  auto hot = seq_of(4, 1), cold = seq_of(4, 10), mid = seq_of(4, 20);
  f.add(c, hot);
  uint64_t key;
  for (int i = 0; i < 3; ++i) c.match(hot, 1, key);  // three hits
  f.add(c, cold);
  f.add(c, mid);
  c.match(mid, 1, key);
  c.match(cold, 1, key);  // cold is the most recent, but hot has the hits
  EXPECT_EQ(c.stats().blocks, 3);
  f.add(c, seq_of(4, 30));  // over budget: the lowest priority goes
  EXPECT_EQ(c.stats().blocks, 3);
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.match(hot, 1, key).size(), 1u);
  EXPECT_EQ(c.match(cold, 1, key).size(), 1u);
  EXPECT_TRUE(c.match(mid, 1, key).empty()) << "mid: one hit, older than cold";

  // A block a live sequence holds is pinned: the budget is exceeded until it is released.
  PrefixCache tiny(f.fake.kv_layout(), bb);
  auto pinned = f.blocks_of(seq_of(4, 40));
  const auto t40 = seq_of(4, 40), t41 = seq_of(4, 41);
  tiny.insert(tiny.root(), 0, t40, pinned[0]);
  auto other = f.blocks_of(seq_of(4, 41));
  tiny.insert(tiny.root(), 0, t41, other[0]);
  EXPECT_EQ(tiny.stats().blocks, 2);  // both held elsewhere
  other.clear();
  tiny.evict_to_budget();
  EXPECT_EQ(tiny.stats().blocks, 1);
  EXPECT_EQ(tiny.match(seq_of(4, 41), 1, key).size(), 0u) << "the released one went";
  EXPECT_EQ(tiny.match(seq_of(4, 40), 1, key).size(), 1u);
}

TEST(PrefixCache, eviction_trims_a_chain_from_its_end) {
  Fixture f;
  const int64_t bb = f.fake.kv_layout().block_bytes;
  PrefixCache c(f.fake.kv_layout(), 4 * bb);
  auto a = seq_of(16, 1);
  f.add(c, a);
  f.add(c, seq_of(4, 60));  // fifth block: one of a's must go, and it is the last one
  uint64_t key;
  EXPECT_EQ(c.match(a, 4, key).size(), 3u);
}

TEST(PrefixCache, hottest_lists_parents_before_children_within_the_byte_limit) {
  Fixture f;
  const int64_t bb = f.fake.kv_layout().block_bytes;
  PrefixCache c(f.fake.kv_layout(), 100 * bb);
  auto a = seq_of(16, 1), b = seq_of(8, 20);
  f.add(c, a);
  f.add(c, b);
  uint64_t key;
  c.match(b, 2, key);
  c.match(b, 2, key);
  auto all = c.hottest(100 * bb);
  ASSERT_EQ(all.size(), 6u);
  std::set<uint64_t> seen{c.root()};
  for (auto* e : all) {
    EXPECT_TRUE(seen.count(e->parent)) << "child before its parent";
    seen.insert(e->key);
  }
  EXPECT_EQ(all[0]->tokens, std::vector<int32_t>(b.begin(), b.begin() + 4)) << "hits first";
  EXPECT_EQ(c.hottest(3 * bb).size(), 3u);
  EXPECT_TRUE(c.hottest(bb - 1).empty());
}

TEST(PrefixCache, zero_budget_caches_nothing) {
  Fixture f;
  PrefixCache c(f.fake.kv_layout(), 0);
  f.add(c, seq_of(8, 1));
  EXPECT_EQ(c.stats().blocks, 0);
}

// A sequence past gemma3's sliding window keeps only the global layers' part of its early
// blocks. The cache's whole copies of them are not pinned: over budget they go, freeing the
// sliding parts only the cache held, so the sequence costs its window; within budget they stay,
// and only their sliding parts count as idle (live - idle is the sequence's own memory, what
// the engine reports as sequences' KV bytes).
//
// PublishingSequence feeds 480 tokens (30 blocks) in chunks of 48 to a sequence on a cache of
// `budget_blocks`, inserting each newly full block after each forward (as the engine publishes).
struct PublishingSequence {
  explicit PublishingSequence(int64_t budget_blocks)
      : cache(b->kv_layout(), budget_blocks * b->kv_layout().block_bytes) {
    const int32_t B = b->kv_layout().block_tokens;
    std::vector<float> logits(size_t(b->config().n_vocab));
    uint64_t parent = cache.root();
    int32_t published = 0;
    for (size_t at = 0; at < toks.size(); at += 48) {
      model::ForwardItem it{seq.get(), std::span(toks).subspan(at, 48), true};
      EXPECT_TRUE(b->forward({&it, 1}, logits).ok());
      for (; (published + 1) * B <= seq->length(); ++published) {
        parent = cache.insert(parent, published,
                              std::span(toks).subspan(size_t(published * B), size_t(B)),
                              seq->block(published));
      }
    }
  }
  std::shared_ptr<model::Backend> b =
      testing::load_backend(testing::gemma3_fixture("prefix_window"));
  int64_t block_bytes = b->kv_layout().block_bytes;
  std::unique_ptr<model::Sequence> seq = b->new_sequence(512);
  std::vector<int32_t> toks = seq_of(480, 3);
  PrefixCache cache;
};

TEST(PrefixCache, over_budget_it_drops_blocks_a_sequence_past_the_window_holds_only_in_part) {
  PublishingSequence p(4);
  // What is left is pinned: the blocks the sequence still holds whole (its window).
  EXPECT_GT(p.cache.stats().blocks, 4);
  EXPECT_LT(p.cache.stats().blocks, 30);
  EXPECT_EQ(p.cache.idle_bytes(), 0);
  EXPECT_EQ(p.b->live_kv_bytes(), p.seq->kv_bytes()) << "the cache holds nothing beyond it";
  EXPECT_LT(p.seq->kv_bytes(), 30 * p.block_bytes / 2);
}

TEST(PrefixCache, within_budget_only_the_sliding_parts_of_blocks_held_in_part_are_idle) {
  PublishingSequence p(64);
  EXPECT_EQ(p.cache.stats().blocks, 30);
  EXPECT_LT(p.seq->kv_bytes(), 30 * p.block_bytes) << "the sequence let go of sliding parts";
  EXPECT_GT(p.cache.idle_bytes(), 0);
  EXPECT_EQ(p.b->live_kv_bytes() - p.cache.idle_bytes(), p.seq->kv_bytes());
  p.seq.reset();
  EXPECT_EQ(p.cache.idle_bytes(), p.b->live_kv_bytes());
  EXPECT_EQ(p.b->live_kv_bytes(), 30 * p.block_bytes);
}

}  // namespace
}  // namespace ember::engine
