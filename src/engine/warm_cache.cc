#include "engine/warm_cache.h"

#include <xxhash.h>

#include <bit>
#include <chrono>
#include <cstring>
#include <unordered_set>
#include <vector>

#include "base/file.h"
#include "engine/prefix_cache.h"
#include "model/backend.h"
#include "model/fingerprint.h"

namespace ember::engine {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kMagic[8] = {'E', 'M', 'B', 'E', 'R', 'W', 'R', 'M'};
constexpr size_t kChecksummed = kWarmHeaderBytes - 8;  // the header checksum covers the rest

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

int64_t block_size(const model::KvBlock& b) {
  int64_t n = 0;
  for (std::span<const uint8_t> piece : b.bytes()) n += static_cast<int64_t>(piece.size());
  return n;
}

size_t index_entry_bytes(int32_t block_tokens) {
  return 32 + 4 * static_cast<size_t>(block_tokens);
}

// Little-endian field access (x86-64 and aarch64 are both little-endian; the static_assert
// keeps a big-endian port honest).
static_assert(std::endian::native == std::endian::little, "warm file fields are little-endian");
template <typename T>
void put(std::vector<uint8_t>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

struct Header {
  uint32_t version = 0;
  uint32_t header_bytes = 0;
  uint64_t fingerprint = 0;
  uint64_t context_key = 0;
  uint32_t block_tokens = 0;
  std::string dtype;
  uint64_t block_bytes = 0;
  uint64_t n_blocks = 0;
  uint64_t index_checksum = 0;
};

std::vector<uint8_t> encode_header(const model::KvLayout& l, uint64_t n_blocks,
                                   uint64_t index_checksum) {
  std::vector<uint8_t> h(kWarmHeaderBytes, 0);
  std::memcpy(h.data(), kMagic, 8);
  put<uint32_t>(h, 8, kWarmFormatVersion);
  put<uint32_t>(h, 12, kWarmHeaderBytes);
  put<uint64_t>(h, 16, l.model_fingerprint);
  put<uint64_t>(h, 24, l.context_key);
  put<uint32_t>(h, 32, static_cast<uint32_t>(l.block_tokens));
  const size_t dl = std::min<size_t>(l.dtype.size(), 8);
  put<uint32_t>(h, 36, static_cast<uint32_t>(dl));
  std::memcpy(h.data() + 40, l.dtype.data(), dl);
  put<uint64_t>(h, 48, static_cast<uint64_t>(l.block_bytes));
  put<uint64_t>(h, 56, n_blocks);
  put<uint64_t>(h, 64, index_checksum);
  put<uint64_t>(h, 72, 0);  // reserved
  put<uint64_t>(h, 80,
                static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count()));
  put<uint64_t>(h, kChecksummed, XXH3_64bits(h.data(), kChecksummed));
  return h;
}

Result<Header> decode_header(std::span<const uint8_t> f, const std::string& path) {
  if (f.size() < kWarmHeaderBytes) {
    return fail("{}: {} bytes, shorter than the {}-byte header (truncated)", path, f.size(),
                kWarmHeaderBytes);
  }
  const uint8_t* p = f.data();
  if (std::memcmp(p, kMagic, 8) != 0) return fail("{}: not an ember warm-state file", path);
  Header h;
  h.version = get<uint32_t>(p + 8);
  // The version is read before the checksum so a newer file gets a clear message.
  if (h.version > kWarmFormatVersion) {
    return fail("{}: format version {} is newer than this build reads ({})", path, h.version,
                kWarmFormatVersion);
  }
  if (get<uint64_t>(p + kChecksummed) != XXH3_64bits(p, kChecksummed)) {
    return fail("{}: header checksum mismatch (corrupted)", path);
  }
  if (h.version != kWarmFormatVersion) {
    return fail("{}: format version {} is not {}", path, h.version, kWarmFormatVersion);
  }
  h.header_bytes = get<uint32_t>(p + 12);
  h.fingerprint = get<uint64_t>(p + 16);
  h.context_key = get<uint64_t>(p + 24);
  h.block_tokens = get<uint32_t>(p + 32);
  const uint32_t dl = get<uint32_t>(p + 36);
  if (h.header_bytes != kWarmHeaderBytes || dl > 8) {
    return fail("{}: malformed header (size {}, dtype length {})", path, h.header_bytes, dl);
  }
  h.dtype.assign(reinterpret_cast<const char*>(p + 40), dl);
  h.block_bytes = get<uint64_t>(p + 48);
  h.n_blocks = get<uint64_t>(p + 56);
  h.index_checksum = get<uint64_t>(p + 64);
  return h;
}

}  // namespace

std::string warm_file_path(const std::string& dir) {
  return dir + "/ember-warm.kv";
}

Result<WarmReport> save_warm_file(const std::string& path, const PrefixCache& cache,
                                  const WarmCacheOptions& opts, Deadline deadline) {
  const auto t0 = Clock::now();
  const model::KvLayout& l = cache.layout();
  const std::vector<const PrefixCache::Entry*> chosen = cache.hottest(opts.max_bytes);
  const size_t B = static_cast<size_t>(l.block_tokens);
  const size_t eb = index_entry_bytes(l.block_tokens);
  std::vector<uint8_t> index(chosen.size() * eb);
  for (size_t i = 0; i < chosen.size(); ++i) {
    const PrefixCache::Entry& e = *chosen[i];
    EMBER_ASSERT(block_size(*e.block) == l.block_bytes && e.tokens.size() == B);
    const size_t at = i * eb;
    put<uint64_t>(index, at, e.key);
    put<uint64_t>(index, at + 8, e.parent);
    put<uint32_t>(index, at + 16, static_cast<uint32_t>(e.depth));
    put<uint32_t>(index, at + 20, e.hits);
    put<uint64_t>(index, at + 24, model::kv_block_checksum(*e.block));
    std::memcpy(index.data() + at + 32, e.tokens.data(), B * sizeof(int32_t));
  }
  const auto header = encode_header(l, chosen.size(), XXH3_64bits(index.data(), index.size()));

  EMBER_TRY(AtomicFileWriter w, AtomicFileWriter::create(path));
  EMBER_TRY_STATUS(w.write(header));
  EMBER_TRY_STATUS(w.write(index));
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (Clock::now() > deadline) {
      return fail("{}: save stopped after {} of {} blocks: time budget spent (previous file kept)",
                  path, i, chosen.size());
    }
    for (std::span<const uint8_t> piece : chosen[i]->block->bytes()) {
      EMBER_TRY_STATUS(w.write(piece));
    }
    if (opts.after_block_written) opts.after_block_written(static_cast<int64_t>(i + 1));
  }
  EMBER_TRY_STATUS(w.commit());
  WarmReport r;
  r.ok = true;
  r.blocks = static_cast<int64_t>(chosen.size());
  r.bytes = static_cast<int64_t>(header.size() + index.size()) +
            r.blocks * static_cast<int64_t>(l.block_bytes);
  r.seconds = seconds_since(t0);
  return r;
}

Result<WarmReport> load_warm_file(const std::string& path, model::Backend& backend,
                                  PrefixCache& cache, Deadline deadline) {
  const auto t0 = Clock::now();
  EMBER_TRY(MappedFile file, MappedFile::open(path));
  const std::span<const uint8_t> f = file.bytes();
  EMBER_TRY(Header h, decode_header(f, path));
  const model::KvLayout& l = backend.kv_layout();
  if (h.fingerprint != l.model_fingerprint) {
    return fail("{}: written for another model (fingerprint {:016x}, this model {:016x})", path,
                h.fingerprint, l.model_fingerprint);
  }
  if (h.dtype != l.dtype || h.block_tokens != uint32_t(l.block_tokens) ||
      h.block_bytes != uint64_t(l.block_bytes)) {
    return fail("{}: KV layout differs (file: {} x {} tokens, {} bytes; this engine: {} x {}, {})",
                path, h.dtype, h.block_tokens, h.block_bytes, l.dtype, l.block_tokens,
                l.block_bytes);
  }
  if (h.context_key != l.context_key) {
    return fail("{}: KV context differs (rope or layout settings changed)", path);
  }
  const size_t B = static_cast<size_t>(l.block_tokens);
  const uint64_t eb = index_entry_bytes(l.block_tokens);
  const uint64_t max_blocks = (f.size() - kWarmHeaderBytes) / (eb + h.block_bytes);
  if (h.n_blocks > max_blocks) {
    return fail("{}: header promises {} blocks, the file holds at most {} (truncated)", path,
                h.n_blocks, max_blocks);
  }
  const uint64_t want = kWarmHeaderBytes + h.n_blocks * (eb + h.block_bytes);
  if (f.size() != want) {
    return fail("{}: {} bytes, expected {} for {} blocks ({})", path, f.size(), want, h.n_blocks,
                f.size() < want ? "truncated" : "trailing bytes");
  }
  const uint8_t* index = f.data() + kWarmHeaderBytes;
  if (XXH3_64bits(index, h.n_blocks * eb) != h.index_checksum) {
    return fail("{}: index checksum mismatch (corrupted)", path);
  }
  struct Loaded {
    uint64_t parent;
    int32_t depth;
    uint32_t hits;
    std::vector<int32_t> tokens;
    model::KvBlockRef block;
  };
  std::vector<Loaded> blocks;
  blocks.reserve(h.n_blocks);
  std::unordered_set<uint64_t> seen{l.context_key};
  const uint8_t* payload = index + h.n_blocks * eb;
  for (uint64_t i = 0; i < h.n_blocks; ++i) {
    if (Clock::now() > deadline) {
      return fail("{}: load stopped after {} of {} blocks: time budget spent", path, i, h.n_blocks);
    }
    const uint8_t* e = index + i * eb;
    Loaded b;
    const uint64_t key = get<uint64_t>(e);
    b.parent = get<uint64_t>(e + 8);
    b.depth = static_cast<int32_t>(get<uint32_t>(e + 16));
    b.hits = get<uint32_t>(e + 20);
    b.tokens.resize(B);
    std::memcpy(b.tokens.data(), e + 32, B * sizeof(int32_t));
    for (int32_t t : b.tokens) {
      if (t < 0 || t >= backend.config().n_vocab) {
        return fail("{}: block {} holds token id {} outside the vocabulary", path, i, t);
      }
    }
    if (!seen.count(b.parent) || (b.parent == l.context_key) != (b.depth == 0)) {
      return fail("{}: block {} does not follow a block before it", path, i);
    }
    if (PrefixCache::chain(b.parent, b.tokens) != key) {
      return fail("{}: block {} key does not match its tokens", path, i);
    }
    const std::span<const uint8_t> data(payload + i * h.block_bytes, h.block_bytes);
    if (XXH3_64bits(data.data(), data.size()) != get<uint64_t>(e + 24)) {
      return fail("{}: block {} payload checksum mismatch (corrupted)", path, i);
    }
    EMBER_TRY(b.block, backend.kv_block_from_bytes(data));
    seen.insert(key);
    blocks.push_back(std::move(b));
  }
  for (Loaded& b : blocks) {
    cache.insert(b.parent, b.depth, b.tokens, std::move(b.block), b.hits);
  }
  WarmReport r;
  r.ok = true;
  r.blocks = static_cast<int64_t>(blocks.size());
  r.bytes = static_cast<int64_t>(f.size());
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace ember::engine
