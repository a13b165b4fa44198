// PrefixCache: full KV blocks of earlier sequences, keyed by a hash chain, so a request that
// shares a prefix with an earlier one (a system prompt, a conversation's history) skips that
// part of its prefill. Engine thread only (no locking).
//
// Keys: key(block i) = H(key(block i-1), the block's token ids), with key(block -1) = the
// backend's KvLayout::context_key (model fingerprint, KV dtype and layout, rope settings), so a
// key names one exact token prefix under one exact model. Hashes are never trusted alone: each
// entry stores its parent key and its tokens, and a lookup compares both, so a 64-bit collision
// costs a miss, never a wrong block.
//
// Blocks are shared (KvBlockRef): an entry whose block is also held by a live sequence is in
// use (use_count > 1) and is never evicted. A sequence past a sliding window holds only the
// global layers' part of its early blocks (another block object): those entries are not in use
// — the cache alone keeps their sliding part, which counts against the budget like any idle
// block — so a long sequence over budget costs its window, not its history. Over the byte budget,
// the entry with the lowest priority = last_used + kHitBonus * min(hits, kMaxHits) goes first (LRU
// weighted by hits; the clock ticks once per lookup), deepest first on ties, so a chain is trimmed
// from its end. A parent is touched whenever its child is, so it never ranks below the child.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "model/backend.h"

namespace ember::engine {

struct PrefixCacheStats {
  uint64_t lookups_hit = 0;    // lookups that reused at least one block
  uint64_t lookups_miss = 0;   // lookups that reused none
  uint64_t evictions = 0;      // blocks dropped for the budget
  uint64_t cached_tokens = 0;  // prompt tokens served from the cache
  uint64_t inserted = 0;       // blocks added
  int64_t blocks = 0;          // blocks held now
  int64_t bytes = 0;           // their KV bytes
};

class PrefixCache {
 public:
  static constexpr uint64_t kHitBonus = 16;  // lookups a hit keeps a block ahead of plain LRU
  static constexpr uint32_t kMaxHits = 16;

  struct Entry {
    uint64_t key = 0;
    uint64_t parent = 0;  // the context key for the first block of a chain
    int32_t depth = 0;    // 0 for the first block
    uint32_t hits = 0;
    uint64_t last_used = 0;
    std::vector<int32_t> tokens;  // block_tokens ids
    model::KvBlockRef block;
    uint64_t priority() const { return last_used + kHitBonus * std::min(hits, kMaxHits); }
  };

  // budget_bytes <= 0: the cache holds nothing (every insert is dropped).
  PrefixCache(const model::KvLayout& layout, int64_t budget_bytes);

  uint64_t root() const { return layout_.context_key; }
  int32_t block_tokens() const { return layout_.block_tokens; }
  // The key of a block with these tokens after the block keyed `parent`.
  static uint64_t chain(uint64_t parent, std::span<const int32_t> tokens);

  // The longest cached prefix of `tokens`, at most max_blocks blocks (the caller leaves at least
  // one token to compute). Touches what it returns and counts one hit or miss (none when
  // max_blocks is 0). `last_key` gets the key of the last block returned (root() if none).
  std::vector<model::KvBlockRef> match(std::span<const int32_t> tokens, int32_t max_blocks,
                                       uint64_t& last_key);
  // Adds a block (tokens: its block_tokens ids) after `parent` at `depth`; returns its key.
  // An entry already there (another sequence got there first) is kept and touched.
  uint64_t insert(uint64_t parent, int32_t depth, std::span<const int32_t> tokens,
                  model::KvBlockRef block, uint32_t hits = 0);
  // Drops unused entries, lowest priority first, until within budget (or nothing is evictable).
  void evict_to_budget();

  // Entries worth keeping, hottest first, at most max_bytes of blocks; a chosen entry's parent
  // is always chosen before it (so a reader can rebuild the chains in order).
  std::vector<const Entry*> hottest(int64_t max_bytes) const;

  const PrefixCacheStats& stats() const { return stats_; }
  // Bytes of block memory nobody but the cache holds (the rest is also live sequences'
  // memory): whole blocks no sequence uses, and the sliding parts of blocks a sequence keeps
  // only the global part of.
  int64_t idle_bytes() const;
  const model::KvLayout& layout() const { return layout_; }

 private:
  model::KvLayout layout_;
  int64_t budget_;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  PrefixCacheStats stats_;
};

}  // namespace ember::engine
