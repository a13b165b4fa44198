// Robustness: every truncation of a valid file is an error, and random mutations never crash
// (these run under ASan/UBSan too, where an out-of-bounds read would be caught).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "gguf/reader.h"
#include "gguf_test_util.h"

namespace ember::gguf {
namespace {

using ::testing::HasSubstr;

// Reads every byte a successfully opened file exposes, so a view that escapes the mapping
// shows up under ASan (or as a crash) rather than passing silently.
uint64_t touch_everything(const File& f) {
  uint64_t sum = 0;
  auto touch_value = [&](auto& self, const Value& v) -> void {
    for (char c : v.s) sum += static_cast<uint8_t>(c);
    for (size_t k = 0; k < v.size(); ++k) self(self, v.at(k));
  };
  for (const auto& [k, v] : f.metadata()) touch_value(touch_value, v);
  for (const auto& t : f.tensors()) {
    for (size_t k = 0; k < t.nbytes; ++k) sum += t.data[k];
  }
  sum += describe(f).size();
  return sum;
}

TEST(GgufRobustness, every_truncation_before_the_end_of_tensor_data_is_an_error) {
  testing::ScratchDir dir;
  auto good = testing::small_writer().serialize();
  std::string path = testing::write_bytes(dir.path("full.gguf"), good);
  auto full = File::open(path);
  ASSERT_TRUE(full.ok()) << full.message();
  // The last meaningful byte is the end of the last tensor's data; after it is only padding.
  size_t data_end = 0;
  for (const auto& t : full->tensors()) data_end = std::max(data_end, t.offset + t.nbytes);
  const size_t meaningful = full->data_offset() + data_end;
  ASSERT_LT(meaningful, good.size());  // the writer padded the end
  ASSERT_LE(meaningful, good.size());

  std::string tpath = dir.path("t.gguf");
  for (size_t len = 0; len < meaningful; ++len) {
    testing::write_bytes(tpath, std::vector<uint8_t>(good.begin(), good.begin() + len));
    auto f = File::open(tpath);
    ASSERT_FALSE(f.ok()) << "truncated to " << len << " bytes but opened";
    EXPECT_THAT(f.message(), HasSubstr(tpath + ": ")) << len;
    // Which problem depends on where the cut falls; each message says what is missing.
    EXPECT_THAT(f.message(),
                ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("too short"),
                                 HasSubstr("cannot fit"), HasSubstr("past the end of the file")))
        << len << ": " << f.message();
  }
  for (size_t len = meaningful; len <= good.size(); ++len) {
    testing::write_bytes(tpath, std::vector<uint8_t>(good.begin(), good.begin() + len));
    auto f = File::open(tpath);
    EXPECT_TRUE(f.ok()) << len << ": " << f.message();
  }
}

TEST(GgufRobustness, random_mutations_never_crash_and_opened_files_stay_in_bounds) {
  testing::ScratchDir dir;
  auto w = testing::small_writer();
  Value nested;  // an array of arrays, so mutations also hit the recursive path
  nested.type = ValueType::ARRAY;
  nested.elem_type = ValueType::ARRAY;
  Value inner;
  inner.type = ValueType::ARRAY;
  inner.elem_type = ValueType::STRING;
  inner.arr.resize(2);
  inner.arr[0].type = inner.arr[1].type = ValueType::STRING;
  inner.arr[0].s = "ab";
  inner.arr[1].s = "cde";
  nested.arr = {inner, inner};
  w.set_value("nested", nested);
  const auto good = w.serialize();
  const std::string path = dir.path("m.gguf");

  std::mt19937_64 rng(20240611);
  int opened = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = good;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % b.size();
      switch (rng() % 4) {
        case 0:
          b[pos] = static_cast<uint8_t>(rng());
          break;
        case 1:
          b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 2: {  // a plausible-looking but wrong count or length
          uint64_t v = rng() % 3 == 0 ? ~uint64_t{0} - (rng() % 64) : rng() % 300;
          if (pos + 8 <= b.size()) testing::patch<uint64_t>(b, pos, v);
          break;
        }
        default:
          b.resize(pos);
          break;  // truncate
      }
      if (b.empty()) break;
    }
    testing::write_bytes(path, b);
    auto f = File::open(path);
    if (f.ok()) {
      ++opened;
      EXPECT_GT(touch_everything(*f), 0u);
    } else {
      ++rejected;
      EXPECT_THAT(f.message(), HasSubstr(path + ": "));
    }
  }
  // Both outcomes must occur, or the loop is not exercising what it claims to.
  EXPECT_GT(opened, 0);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace ember::gguf
