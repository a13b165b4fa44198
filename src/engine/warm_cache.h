// Warm state: the prefix cache's hottest blocks in a file, written on graceful exit and read at
// start. The file is never trusted: anything short of a fully valid file for
// this exact model and KV layout is rejected whole (an Error naming what is wrong; the engine
// logs it and starts cold), never a crash and never a block under the wrong key.
// See docs/architecture.md, "Warm start".
//
// Format (little-endian), version 1:
//   header   96 bytes: magic "EMBERWRM", u32 version, u32 header size, u64 model fingerprint,
//            u64 context key, u32 block tokens, u32 dtype length, char dtype[8], u64 block
//            bytes, u64 block count, u64 xxh3 of the index, u64 xxh3 of the payload checksums
//            (reserved, 0), u64 xxh3 of the 88 bytes before it;
//   index    per block: u64 key, u64 parent key, u32 depth, u32 hits, u64 xxh3 of its payload,
//            i32 tokens[block tokens]; a block's parent comes before it;
//   payload  per block, in index order: block bytes of KV.
// The reader checks the sizes add up exactly, both checksums, that each key is the hash chain
// of its parent and tokens (the first block's parent is the context key), and each payload's
// checksum — before a single block enters the cache.
//
// Writes are atomic (AtomicFileWriter: temp file, fsync, rename, fsync the directory): a crash
// or kill -9 mid-write leaves the previous file. Both directions stop at a deadline (a partial
// save is abandoned, keeping the old file; a slow load starts cold).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "base/result.h"

namespace ember::model {
class Backend;
}

namespace ember::engine {

class PrefixCache;

struct WarmCacheOptions {
  std::string dir;                             // "": no warm state
  int64_t max_bytes = int64_t{256} << 20;      // KV bytes written at most
  std::chrono::milliseconds io_budget{10000};  // each of load and save
  bool load_at_start = true;
  bool save_at_exit = true;
  // Tests only: called after each block's payload is written (a subprocess test blocks here
  // and is killed mid-write).
  std::function<void(int64_t blocks_written)> after_block_written;
};

struct WarmReport {
  bool ok = false;     // loaded / saved (a missing file at load is ok with 0 blocks)
  int64_t blocks = 0;  // blocks loaded or written
  int64_t bytes = 0;   // file bytes read or written
  double seconds = 0;
  std::string message;  // why not, when !ok
};

constexpr uint32_t kWarmFormatVersion = 1;
constexpr size_t kWarmHeaderBytes = 96;

std::string warm_file_path(const std::string& dir);  // dir + "/ember-warm.kv"

using Deadline = std::chrono::steady_clock::time_point;

// Writes the hottest blocks of `cache`, at most max_bytes of KV, to `path`.
Result<WarmReport> save_warm_file(const std::string& path, const PrefixCache& cache,
                                  const WarmCacheOptions& opts, Deadline deadline);
// Validates the whole file, then inserts its blocks into `cache` (made from `backend`).
Result<WarmReport> load_warm_file(const std::string& path, model::Backend& backend,
                                  PrefixCache& cache, Deadline deadline);

}  // namespace ember::engine
