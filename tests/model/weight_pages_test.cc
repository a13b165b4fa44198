// The file mapping after load: once a model runs from huge-page copies of its weights, no page
// of the file's tensor data stays mapped in this process, whatever read it (the copy, the
// fingerprint's samples, forwards before a background copy was adopted), and forwards do not
// map any back in. On a kernel that maps the page cache in 2 MiB folios each such page is 2 MiB
// of RSS (Gemma 3 270M: 68 MB from the fingerprint alone, its peak 13 MB over issue 12's
// bound), so this is checked page by page through /proc/self/pagemap rather than through RSS
// totals.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/fingerprint.h"
#include "model/model_test_util.h"

namespace ember::model {
namespace {

using namespace ember::model::testing;
using tensor::DType;

// Pages of [p, p + n) that this process has mapped (pagemap's "present" bit, readable without
// privileges); -1 where pagemap cannot be read.
int64_t mapped_pages(const uint8_t* p, size_t n) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) / page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n + page - 1) / page;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::vector<uint64_t> entries(hi - lo);
  const auto want = static_cast<ssize_t>(entries.size() * sizeof(uint64_t));
  const ssize_t got = ::pread(fd, entries.data(), want, static_cast<off_t>(lo * sizeof(uint64_t)));
  ::close(fd);
  if (got != want) return -1;
  return std::count_if(entries.begin(), entries.end(), [](uint64_t e) { return (e >> 63) != 0; });
}

// [first tensor's start, last tensor's end) of f: its tensor data.
std::pair<const uint8_t*, size_t> tensor_data(const gguf::File& f) {
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (lo == nullptr || t.data < lo) lo = t.data;
    if (hi == nullptr || t.data + t.nbytes > hi) hi = t.data + t.nbytes;
  }
  return {lo, static_cast<size_t>(hi - lo)};
}

int64_t mapped_tensor_pages(const gguf::File& f) {
  const auto [p, n] = tensor_data(f);
  return mapped_pages(p, n);
}

// Reads every byte of f's tensor data, so all of it is mapped; returns the sum so the reads
// are not optimised away.
uint64_t touch_tensor_data(const gguf::File& f) {
  const auto [p, n] = tensor_data(f);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i += 64) sum += p[i];
  return sum;
}

fixture::FixtureSpec gemma_spec() {
  fixture::FixtureSpec spec;
  spec.arch = "gemma3";  // every kind of norm vector: q/k and post norms too
  spec.type = DType::Q8_0;
  return spec;
}

TEST(WeightPages, the_fingerprint_leaves_no_sampled_page_mapped) {
  auto f = fixture_file(gemma_spec(), "pages_fingerprint");
  ASSERT_TRUE(f);
  auto cfg = read_config(*f);
  ASSERT_TRUE(cfg.ok()) << cfg.message();
  ASSERT_GT(touch_tensor_data(*f) + 1, 0u);
  ASSERT_GT(mapped_tensor_pages(*f), 0) << "reading the data maps it (the check can see pages)";
  f->release_tensor_data();
  ASSERT_EQ(mapped_tensor_pages(*f), 0);
  const uint64_t a = model_fingerprint(*f, *cfg);
  EXPECT_EQ(mapped_tensor_pages(*f), 0) << "the fingerprint's windows stay mapped";
  EXPECT_EQ(model_fingerprint(*f, *cfg), a) << "released pages read back the same bytes";
}

void expect_no_tensor_page_mapped_while_running(const std::string& name, LoadOptions opts) {
  auto f = fixture_file(gemma_spec(), name);
  ASSERT_TRUE(f);
  opts.n_threads = 2;
  auto loaded = load_cpu_model(f, opts);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  std::unique_ptr<Backend> b = std::move(loaded).value();
  const std::vector<int32_t> toks{1, 5, 9, 3};
  auto s1 = b->new_sequence(16);
  run(*b, *s1, toks);  // with a background copy: the mapping or the copies
  b->settle_weights();
  ASSERT_GT(b->weight_copy_bytes(), 0);
  auto s2 = b->new_sequence(16);
  run(*b, *s2, toks);  // the copies, for sure
  run(*b, *s2, std::vector<int32_t>{7});
  EXPECT_EQ(mapped_tensor_pages(*f), 0) << name;
}

TEST(WeightPages, a_model_running_from_copies_keeps_no_page_of_its_file_mapped) {
  expect_no_tensor_page_mapped_while_running("pages_fg", LoadOptions{});
  LoadOptions bg;
  bg.copy_weights_in_background = true;
  expect_no_tensor_page_mapped_while_running("pages_fg_bg", bg);
}

// Whether a thread of this process is named `name` (the weight copier names itself).
bool thread_named(const std::string& name) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(e.path() / "comm");
    std::string n;
    if (std::getline(comm, n) && n == name) return true;
  }
  return false;
}

// Deterministic in its order: the copier has ended (its thread is gone) before the test reads
// the mapping as a forward before adoption would, and the next forward adopts.
TEST(WeightPages, a_background_copy_leaves_no_page_mapped_when_done_nor_once_adopted) {
  auto f = fixture_file(gemma_spec(), "pages_bg");
  ASSERT_TRUE(f);
  LoadOptions bg;
  bg.copy_weights_in_background = true;
  bg.n_threads = 2;
  auto loaded = load_cpu_model(f, bg);
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  std::unique_ptr<Backend> b = std::move(loaded).value();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (thread_named("ember-wcopy") && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(thread_named("ember-wcopy")) << "the copy did not end";
  EXPECT_EQ(mapped_tensor_pages(*f), 0) << "a finished copy, not yet adopted (an idle server)";
  ASSERT_GT(touch_tensor_data(*f) + 1, 0u);  // as forwards before the adoption read it
  ASSERT_GT(mapped_tensor_pages(*f), 0);
  auto s = b->new_sequence(16);
  run(*b, *s, std::vector<int32_t>{1, 5, 9, 3});  // adopts the copies
  EXPECT_GT(b->weight_copy_bytes(), 0);
  EXPECT_EQ(mapped_tensor_pages(*f), 0) << "pages forwards mapped before the adoption";
}

}  // namespace
}  // namespace ember::model
