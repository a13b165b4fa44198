// Warm state: saved on graceful exit, loaded at start, never trusted. A good file makes the
// next engine warm with identical output; a truncated (at every block boundary), bit-flipped
// (every header and index byte, payload bytes), foreign (other model or context), future or
// half-written (writer killed with SIGKILL) file is a logged warning and a cold start.
#include "engine/warm_cache.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/file.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/fake_backend.h"
#include "engine/prefix_cache.h"

namespace ember::engine {
namespace {

using namespace testing;  // NOLINT
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/ember_warm_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, std::span<const uint8_t> b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// Captures what the engine logs while alive.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& s = spdlog::default_logger()->sinks();
    s.erase(std::remove(s.begin(), s.end(), sink_), s.end());
  }
  std::string text() {
    spdlog::default_logger()->flush();
    return out_.str();
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

EngineOptions warm_opts(const std::string& dir) {
  EngineOptions o;
  o.prefix_cache_bytes = int64_t{1} << 30;
  o.warm.dir = dir;
  return o;
}

std::shared_ptr<FakeBackend> fake(uint64_t context = 0xC0FFEE) {
  return std::make_shared<FakeBackend>(FakeOptions{.block_tokens = 4, .context_key = context});
}

const std::vector<int32_t> kSystem = make_prompt(30, 64, 21);

std::vector<int32_t> with_question(uint32_t salt) {
  auto p = kSystem;
  for (int32_t t : make_prompt(5, 64, salt)) p.push_back(t);
  return p;
}

// Runs one request on an engine that saves at exit: leaves a good file with 9 blocks
// (30 + 5 prompt tokens + 2 fed generated tokens = 37 positions).
std::string make_good_file(const std::string& dir) {
  {
    Engine e(fake(), warm_opts(dir));
    drain(*submit_ok(e, greedy_request(with_question(1), 3)));
  }
  const std::string path = warm_file_path(dir);
  EXPECT_TRUE(fs::exists(path));
  return path;
}

// A fresh engine on `dir` that loads by hand, so the report can be checked.
struct Loaded {
  WarmReport report;
  Collected answer;
  EngineStats stats;
};
Loaded load_and_ask(const std::string& dir, std::shared_ptr<FakeBackend> b = fake()) {
  EngineOptions o = warm_opts(dir);
  o.warm.load_at_start = false;
  o.warm.save_at_exit = false;
  Engine e(std::move(b), o);
  Loaded l;
  l.report = e.load_warm_state();
  l.answer = drain(*submit_ok(e, greedy_request(with_question(2), 3)));
  l.stats = e.stats();
  return l;
}

std::vector<int32_t> cold_answer() {
  Engine e(fake(), {});
  return drain(*submit_ok(e, greedy_request(with_question(2), 3))).tokens;
}

TEST(WarmCache, graceful_exit_saves_and_the_next_start_is_warm_with_identical_output) {
  const std::string dir = fresh_dir("roundtrip");
  LogCapture log;
  make_good_file(dir);
  EXPECT_NE(log.text().find("warm state saved: 9 blocks"), std::string::npos) << log.text();
  Engine e(fake(), warm_opts(dir));  // loads in the constructor
  EXPECT_EQ(e.stats().warm_blocks_loaded, 9);
  EXPECT_NE(log.text().find("warm state loaded: 9 blocks"), std::string::npos) << log.text();
  Collected c = drain(*submit_ok(e, greedy_request(with_question(2), 3)));
  EXPECT_EQ(c.done.usage.cached_tokens, 28) << "the 30-token system prompt's 7 full blocks";
  EXPECT_EQ(c.tokens, cold_answer());
  EXPECT_GT(e.stats().warm_load_seconds, 0.0);
}

// On a real gemma3 fixture with a system prompt far longer than its sliding window (as the
// warm-restart benchmark's on Gemma): the sequence that wrote the blocks had let go of their
// sliding parts, yet the cache kept them whole, so the file restores every block and the next
// engine's answer is warm and bit-identical to a cold one.
TEST(WarmCache, a_gemma3_system_prompt_past_the_window_restarts_warm_with_identical_output) {
  const std::string model = gemma3_fixture("warm_gemma3");
  auto backend = [&] { return load_backend(model, 1024); };
  auto first = backend();
  const int32_t V = first->config().n_vocab;
  const auto system = make_prompt(420, V, 31);
  auto ask = [&](uint32_t salt) {
    auto p = system;
    for (int32_t t : make_prompt(7, V, salt)) p.push_back(t);
    GenerateRequest g = greedy_request(std::move(p), 6);
    g.sampling.top_logprobs = 3;
    return g;
  };
  Collected cold;
  {
    Engine e(first, {});
    cold = drain(*submit_ok(e, ask(2)));
  }
  const std::string dir = fresh_dir("gemma3");
  {
    Engine e(first, warm_opts(dir));
    drain(*submit_ok(e, ask(1)));
  }
  Engine e(backend(), warm_opts(dir));  // a fresh backend: a restarted worker
  EXPECT_EQ(e.stats().warm_blocks_loaded, (420 + 7 + 5) / 16);
  Collected warm = drain(*submit_ok(e, ask(2)));
  EXPECT_EQ(warm.done.usage.cached_tokens, 416) << "the system prompt's 26 full blocks";
  EXPECT_EQ(warm.tokens, cold.tokens);
  ASSERT_EQ(warm.events.size(), cold.events.size());
  for (size_t i = 0; i < warm.events.size(); ++i) {
    EXPECT_EQ(warm.events[i].logprob, cold.events[i].logprob) << i;
    EXPECT_EQ(warm.events[i].top, cold.events[i].top) << i;
  }
}

TEST(WarmCache, a_missing_file_is_a_quiet_cold_start) {
  const std::string dir = fresh_dir("missing");
  Loaded l = load_and_ask(dir);
  EXPECT_TRUE(l.report.ok);
  EXPECT_EQ(l.report.blocks, 0);
  EXPECT_EQ(l.answer.done.usage.cached_tokens, 0);
}

// Every rejected file: a warning naming the problem, nothing in the cache, a correct answer.
void expect_cold(const std::string& dir, const std::string& why, const std::string& what,
                 std::shared_ptr<FakeBackend> b = fake()) {
  LogCapture log;
  Loaded l = load_and_ask(dir, std::move(b));
  EXPECT_FALSE(l.report.ok) << what;
  EXPECT_NE(l.report.message.find(why), std::string::npos) << what << ": " << l.report.message;
  EXPECT_NE(log.text().find("warm state rejected, starting cold"), std::string::npos) << what;
  EXPECT_EQ(l.stats.warm_blocks_loaded, 0) << what;
  EXPECT_EQ(l.answer.done.usage.cached_tokens, 0) << what;
  static const std::vector<int32_t> want = cold_answer();
  EXPECT_EQ(l.answer.tokens, want) << what;
}

TEST(WarmCache, a_file_truncated_at_any_block_boundary_is_a_cold_start) {
  const std::string dir = fresh_dir("truncated");
  const auto good = read_bytes(make_good_file(dir));
  const size_t n = 9, eb = 32 + 4 * 4, bb = 16;
  ASSERT_EQ(good.size(), kWarmHeaderBytes + n * (eb + bb));
  std::vector<size_t> cuts = {0, 1, 8, kWarmHeaderBytes - 1, kWarmHeaderBytes, good.size() - 1};
  for (size_t i = 1; i <= n; ++i) cuts.push_back(kWarmHeaderBytes + i * eb);  // index entries
  for (size_t i = 0; i < n; ++i) cuts.push_back(kWarmHeaderBytes + n * eb + i * bb);  // payloads
  for (size_t cut : cuts) {
    write_bytes(warm_file_path(dir), std::span(good).first(cut));
    expect_cold(dir, cut == 0 ? "" : "truncated", "cut at " + std::to_string(cut));
  }
  // Trailing garbage is as bad as a missing tail.
  auto longer = good;
  longer.push_back(0);
  write_bytes(warm_file_path(dir), longer);
  expect_cold(dir, "trailing bytes", "one byte too many");
}

TEST(WarmCache, a_flipped_bit_in_the_header_index_or_payload_is_a_cold_start) {
  const std::string dir = fresh_dir("bitflip");
  const auto good = read_bytes(make_good_file(dir));
  const size_t index_end = kWarmHeaderBytes + 9 * (32 + 16);
  for (size_t at = 0; at < good.size(); ++at) {
    auto bad = good;
    bad[at] ^= uint8_t(1u << (at % 8));
    write_bytes(warm_file_path(dir), bad);
    const char* region = at < kWarmHeaderBytes ? "header" : at < index_end ? "index" : "payload";
    expect_cold(dir, "", std::string(region) + " byte " + std::to_string(at));
  }
}

TEST(WarmCache, a_file_from_another_model_or_context_is_a_cold_start) {
  const std::string dir = fresh_dir("foreign");
  make_good_file(dir);
  expect_cold(dir, "another model", "other model", fake(0xBEEF));
}

TEST(WarmCache, a_file_from_a_future_format_version_is_a_cold_start) {
  const std::string dir = fresh_dir("future");
  auto bytes = read_bytes(make_good_file(dir));
  bytes[8] = uint8_t(kWarmFormatVersion + 1);
  write_bytes(warm_file_path(dir), bytes);
  expect_cold(dir, "newer than this build reads", "future version");
}

TEST(WarmCache, a_save_out_of_time_keeps_the_previous_file) {
  const std::string dir = fresh_dir("deadline");
  const auto before = read_bytes(make_good_file(dir));
  EngineOptions o = warm_opts(dir);
  o.warm.io_budget = std::chrono::milliseconds(0);
  o.warm.load_at_start = false;
  o.warm.save_at_exit = false;
  Engine e(fake(), o);
  drain(*submit_ok(e, greedy_request(make_prompt(40, 64, 5), 2)));
  WarmReport r = e.save_warm_state();
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.message.find("time budget"), std::string::npos) << r.message;
  EXPECT_EQ(read_bytes(warm_file_path(dir)), before);
  EXPECT_FALSE(fs::exists(warm_file_path(dir) + ".tmp." + std::to_string(::getpid())));
}

// A real process, killed with SIGKILL while it writes (between two blocks), leaves the
// previous good file in place; the next start loads that one.
TEST(WarmCache, kill_9_during_the_write_leaves_the_previous_good_file) {
  const std::string dir = fresh_dir("kill9");
  const std::string path = make_good_file(dir);
  const auto before = read_bytes(path);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the writer: a cache with other blocks, saved with a pause mid-write
    ::close(pipefd[0]);
    auto b = fake();
    PrefixCache cache(b->kv_layout(), 1 << 20);
    auto toks = make_prompt(64, 64, 99);
    auto seq = b->new_sequence(128);
    std::vector<float> logits(64);
    model::ForwardItem it{seq.get(), toks, true};
    if (!b->forward({&it, 1}, logits).ok()) ::_exit(2);
    uint64_t parent = cache.root();
    for (int32_t i = 0; i < 16; ++i) {
      parent = cache.insert(parent, i, std::span(toks).subspan(size_t(i) * 4, 4), seq->block(i));
    }
    WarmCacheOptions o;
    o.after_block_written = [&](int64_t n) {
      if (n == 5) {
        const char c = 'w';
        if (::write(pipefd[1], &c, 1) != 1) ::_exit(3);
        for (;;) ::pause();  // killed here
      }
    };
    (void)save_warm_file(path, cache, o, std::chrono::steady_clock::now() + std::chrono::hours(1));
    ::_exit(4);  // not reached: the parent kills us first
  }
  ::close(pipefd[1]);
  char c = 0;
  ASSERT_EQ(::read(pipefd[0], &c, 1), 1) << "the writer never reached the pause";
  ::close(pipefd[0]);
  const std::string tmp = path + ".tmp." + std::to_string(child);
  EXPECT_TRUE(fs::exists(tmp)) << "the writer was mid-write";
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(read_bytes(path), before);
  Loaded l = load_and_ask(dir);
  EXPECT_TRUE(l.report.ok) << l.report.message;
  EXPECT_EQ(l.report.blocks, 9);
  EXPECT_EQ(l.answer.done.usage.cached_tokens, 28);
}

}  // namespace
}  // namespace ember::engine
