#include "engine/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <unordered_set>

namespace ember::engine {

PrefixCache::PrefixCache(const model::KvLayout& layout, int64_t budget_bytes)
    : layout_(layout), budget_(budget_bytes) {
  EMBER_ASSERT(layout_.block_tokens > 0 && layout_.block_bytes > 0);
}

uint64_t PrefixCache::chain(uint64_t parent, std::span<const int32_t> tokens) {
  return XXH3_64bits_withSeed(tokens.data(), tokens.size_bytes(), parent);
}

std::vector<model::KvBlockRef> PrefixCache::match(std::span<const int32_t> tokens,
                                                  int32_t max_blocks, uint64_t& last_key) {
  std::vector<model::KvBlockRef> out;
  last_key = root();
  if (max_blocks <= 0) return out;
  ++clock_;
  const size_t B = static_cast<size_t>(layout_.block_tokens);
  for (int32_t i = 0; i < max_blocks && (size_t(i) + 1) * B <= tokens.size(); ++i) {
    auto blk = tokens.subspan(size_t(i) * B, B);
    const uint64_t key = chain(last_key, blk);
    auto it = entries_.find(key);
    if (it == entries_.end()) break;
    Entry& e = it->second;
    if (e.parent != last_key || !std::equal(blk.begin(), blk.end(), e.tokens.begin())) break;
    e.last_used = clock_;
    e.hits++;
    out.push_back(e.block);
    last_key = key;
  }
  if (out.empty()) {
    stats_.lookups_miss++;
  } else {
    stats_.lookups_hit++;
    stats_.cached_tokens += out.size() * B;
  }
  return out;
}

uint64_t PrefixCache::insert(uint64_t parent, int32_t depth, std::span<const int32_t> tokens,
                             model::KvBlockRef block, uint32_t hits) {
  EMBER_ASSERT(tokens.size() == size_t(layout_.block_tokens) && block != nullptr);
  const uint64_t key = chain(parent, tokens);
  if (budget_ < layout_.block_bytes) return key;
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    // Same prefix (or, astronomically rarely, a collision: then the existing entry stays and
    // the new block is simply not cached — lookups verify parent and tokens either way).
    it->second.last_used = std::max(it->second.last_used, clock_);
    return key;
  }
  Entry e;
  e.key = key;
  e.parent = parent;
  e.depth = depth;
  e.hits = hits;
  e.last_used = clock_;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.block = std::move(block);
  entries_.emplace(key, std::move(e));
  stats_.inserted++;
  stats_.blocks++;
  stats_.bytes += layout_.block_bytes;
  evict_to_budget();
  return key;
}

void PrefixCache::evict_to_budget() {
  while (stats_.bytes > budget_) {
    auto victim = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      // A live sequence reads it. (One past a sliding window that holds only the global part,
      // through another block object, does not pin it: evicting frees the sliding part, which
      // only the cache still holds.)
      if (it->second.block.use_count() > 1) continue;
      if (victim == entries_.end()) {
        victim = it;
        continue;
      }
      const Entry& a = it->second;
      const Entry& v = victim->second;
      if (a.priority() < v.priority() || (a.priority() == v.priority() && a.depth > v.depth)) {
        victim = it;
      }
    }
    if (victim == entries_.end()) return;  // all in use: over budget until they are released
    entries_.erase(victim);
    stats_.evictions++;
    stats_.blocks--;
    stats_.bytes -= layout_.block_bytes;
  }
}

// An entry no sequence holds may still share its global part with a sequence past the window:
// only the rest is idle.
int64_t PrefixCache::idle_bytes() const {
  int64_t n = 0;
  for (const auto& [k, e] : entries_) n += e.block.use_count() == 1 ? e.block->unshared_bytes() : 0;
  return n;
}

std::vector<const PrefixCache::Entry*> PrefixCache::hottest(int64_t max_bytes) const {
  std::vector<const Entry*> all;
  all.reserve(entries_.size());
  for (const auto& [k, e] : entries_) all.push_back(&e);
  std::sort(all.begin(), all.end(), [](const Entry* a, const Entry* b) {
    if (a->priority() != b->priority()) return a->priority() > b->priority();
    if (a->depth != b->depth) return a->depth < b->depth;
    return a->key < b->key;
  });
  std::vector<const Entry*> out;
  std::unordered_set<uint64_t> chosen;
  int64_t bytes = 0;
  // A parent ranks at least as high as its children, but a child can come first on paper
  // (loaded hits, ties): passes repeat until nothing more fits or can be placed.
  for (bool progress = true; progress;) {
    progress = false;
    for (const Entry* e : all) {
      if (bytes + layout_.block_bytes > max_bytes) return out;
      if (chosen.count(e->key)) continue;
      if (e->depth > 0 && !chosen.count(e->parent)) continue;
      chosen.insert(e->key);
      out.push_back(e);
      bytes += layout_.block_bytes;
      progress = true;
    }
  }
  return out;
}

}  // namespace ember::engine
