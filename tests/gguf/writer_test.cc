// Writer → reader round trips: every value type, nested and empty arrays, tensor layout.
#include "gguf/writer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/file.h"
#include "gguf/reader.h"
#include "gguf_test_util.h"

namespace ember::gguf {
namespace {

using testing::ScratchDir;

Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}

Value array_of(ValueType et, std::vector<Value> elems) {
  Value v = scalar(ValueType::ARRAY);
  v.elem_type = et;
  v.arr = std::move(elems);
  return v;
}

File open_ok(const std::string& path) {
  auto f = File::open(path);
  EXPECT_TRUE(f.ok()) << f.message();
  EMBER_ASSERT(f.ok());
  return std::move(f).value();
}

TEST(GgufWriter, round_trips_every_scalar_value_type) {
  ScratchDir dir;
  Writer w;
  Value v;
  v = scalar(ValueType::U8), v.u = 200, w.set_value("u8", v);
  v = scalar(ValueType::I8), v.i = -100, w.set_value("i8", v);
  v = scalar(ValueType::U16), v.u = 60000, w.set_value("u16", v);
  v = scalar(ValueType::I16), v.i = -30000, w.set_value("i16", v);
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set_u64("u64", 18000000000000000000ull);
  w.set_i64("i64", -9000000000000000000ll);
  w.set_f32("f32", 0.25f);
  w.set_f64("f64", 1.0 / 3.0);
  w.set_bool("bool_t", true);
  w.set_bool("bool_f", false);
  w.set_string("str", "héllo\nworld");
  w.set_string("empty_str", "");
  ASSERT_TRUE(w.write(dir.path("m.gguf")).ok());
  File f = open_ok(dir.path("m.gguf"));

  ASSERT_EQ(f.metadata().size(), 14u);
  EXPECT_EQ(f.find("u8")->type, ValueType::U8);
  EXPECT_EQ(f.find("u8")->u, 200u);
  EXPECT_EQ(f.find("i8")->i, -100);
  EXPECT_EQ(f.find("u16")->u, 60000u);
  EXPECT_EQ(f.find("i16")->i, -30000);
  EXPECT_EQ(f.find("u32")->u, 4000000000u);
  EXPECT_EQ(f.find("i32")->i, -2000000000);
  EXPECT_EQ(f.find("u64")->u, 18000000000000000000ull);
  EXPECT_EQ(f.find("i64")->i, -9000000000000000000ll);
  EXPECT_EQ(f.find("f32")->type, ValueType::F32);
  EXPECT_EQ(f.find("f32")->f, 0.25);
  EXPECT_EQ(f.find("f64")->f, 1.0 / 3.0);
  EXPECT_EQ(*f.get_bool("bool_t"), true);
  EXPECT_EQ(*f.get_bool("bool_f"), false);
  EXPECT_EQ(*f.get_string("str"), "héllo\nworld");
  EXPECT_EQ(*f.get_string("empty_str"), "");
  EXPECT_EQ(f.metadata()[0].first, "u8");  // file order is insertion order
  EXPECT_EQ(f.metadata()[13].first, "empty_str");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_TRUE(f.tensors().empty());
}

TEST(GgufWriter, round_trips_arrays_including_nested_and_empty_ones) {
  ScratchDir dir;
  Writer w;
  w.set_string_array("strs", {"a", "", "ccc"});
  w.set_f32_array("floats", {1.5f, -2.0f});
  w.set_i32_array("ints", {7, -8, 9});
  w.set_i32_array("empty", {});
  Value u8s = array_of(ValueType::U8, {});
  for (int k = 0; k < 5; ++k) {
    Value e = scalar(ValueType::U8);
    e.u = static_cast<uint64_t>(k * 50);
    u8s.arr.push_back(e);
  }
  w.set_value("u8s", u8s);
  // [[1, 2], [], [3]] as arrays of u16, and an array of arrays of strings.
  auto u16s = [](std::vector<int> xs) {
    Value a = array_of(ValueType::U16, {});
    for (int x : xs) {
      Value e = scalar(ValueType::U16);
      e.u = static_cast<uint64_t>(x);
      a.arr.push_back(e);
    }
    return a;
  };
  w.set_value("nested", array_of(ValueType::ARRAY, {u16s({1, 2}), u16s({}), u16s({3})}));
  Value s = scalar(ValueType::STRING);
  s.s = "deep";
  w.set_value(
      "nested3",
      array_of(ValueType::ARRAY, {array_of(ValueType::ARRAY, {array_of(ValueType::STRING, {s})})}));
  ASSERT_TRUE(w.write(dir.path("m.gguf")).ok());
  File f = open_ok(dir.path("m.gguf"));

  auto strs = f.get_string_array("strs");
  ASSERT_TRUE(strs.ok()) << strs.message();
  EXPECT_EQ(*strs, (std::vector<std::string_view>{"a", "", "ccc"}));
  EXPECT_EQ(*f.get_float_array("floats"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(*f.get_int_array("ints"), (std::vector<int64_t>{7, -8, 9}));
  const Value* empty = f.find("empty");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->type, ValueType::ARRAY);
  EXPECT_EQ(empty->elem_type, ValueType::I32);
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_EQ(*f.get_int_array("u8s"), (std::vector<int64_t>{0, 50, 100, 150, 200}));

  const Value* nested = f.find("nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elem_type, ValueType::ARRAY);
  ASSERT_EQ(nested->size(), 3u);
  EXPECT_EQ(nested->at(0).elem_type, ValueType::U16);
  ASSERT_EQ(nested->at(0).size(), 2u);
  EXPECT_EQ(nested->at(0).at(1).u, 2u);
  EXPECT_EQ(nested->at(1).size(), 0u);
  EXPECT_EQ(nested->at(2).at(0).u, 3u);
  const Value* n3 = f.find("nested3");
  ASSERT_NE(n3, nullptr);
  EXPECT_EQ(n3->at(0).at(0).at(0).s, "deep");
}

// Arrays of scalars and strings read from a file stay packed in the mapping (a model's
// vocabulary would otherwise be hundreds of thousands of 72-byte Values): no element Values,
// one offset per string, and every element read back through at() exactly as written; written
// out again from the parsed values, the file's file is byte for byte the same.
TEST(GgufWriter, parsed_arrays_of_scalars_and_strings_stay_packed_and_read_back_exactly) {
  ScratchDir dir;
  constexpr int kN = 50000;
  std::vector<std::string> strs;
  std::vector<float> floats;
  std::vector<int32_t> ints;
  for (int k = 0; k < kN; ++k) {
    strs.push_back(k % 7 == 0 ? std::string() : "tok" + std::to_string(k));
    floats.push_back(static_cast<float>(k) * -0.25f);
    ints.push_back(k % 3 - 1);
  }
  Value bools = array_of(ValueType::BOOL, {});
  for (int k = 0; k < 9; ++k) {
    Value e = scalar(ValueType::BOOL);
    e.u = k % 2;
    bools.arr.push_back(e);
  }
  Writer w;
  w.set_string_array("strs", strs);
  w.set_f32_array("floats", floats);
  w.set_i32_array("ints", ints);
  w.set_value("bools", bools);
  ASSERT_TRUE(w.write(dir.path("a.gguf")).ok());
  File f = open_ok(dir.path("a.gguf"));

  const Value* s = f.find("strs");
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(s->arr.empty());
  EXPECT_EQ(s->packed_offsets.size(), static_cast<size_t>(kN) + 1);
  ASSERT_EQ(s->size(), static_cast<size_t>(kN));
  const Value* fl = f.find("floats");
  const Value* in = f.find("ints");
  const Value* bo = f.find("bools");
  ASSERT_TRUE(fl && in && bo);
  EXPECT_TRUE(fl->arr.empty() && in->arr.empty() && bo->arr.empty());
  EXPECT_TRUE(fl->packed_offsets.empty() && in->packed_offsets.empty());
  for (int k = 0; k < kN; ++k) {
    const auto i = static_cast<size_t>(k);
    ASSERT_EQ(s->at(i).type, ValueType::STRING);
    ASSERT_EQ(s->at(i).s, strs[i]) << k;
    ASSERT_EQ(fl->at(i).f, floats[i]) << k;
    ASSERT_EQ(in->at(i).i, ints[i]) << k;
  }
  for (size_t k = 0; k < 9; ++k) EXPECT_EQ(bo->at(k).u, k % 2) << k;
  EXPECT_EQ(*f.get_string_array("strs"), std::vector<std::string_view>(strs.begin(), strs.end()));

  Writer again;
  for (const auto& [key, v] : f.metadata()) again.set_value(key, v);
  ASSERT_TRUE(again.write(dir.path("b.gguf")).ok());
  auto a = read_file(dir.path("a.gguf"));
  auto b = read_file(dir.path("b.gguf"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(GgufWriter, tensor_data_is_zero_copy_and_aligned_inside_the_mapping) {
  ScratchDir dir;
  for (uint64_t alignment : {32u, 64u, 256u}) {
    Writer w(alignment);
    w.set_string("general.name", "x");  // makes the tensor infos end at an odd offset
    auto a = testing::filled(12, 1), b = testing::filled(34 * 3, 2);
    w.add_tensor("a", tensor::DType::F32, {3}, a);
    w.add_tensor("b", tensor::DType::Q8_0, {32, 3}, b);
    auto bytes = w.serialize();
    std::string path = testing::write_bytes(dir.path("m.gguf"), bytes);
    File f = open_ok(path);
    EXPECT_EQ(f.alignment(), alignment);
    if (alignment != 32) {
      EXPECT_EQ(*f.get_int("general.alignment"), static_cast<int64_t>(alignment));
    }
    // The mapping's base is the first byte of the first metadata string minus its offset.
    const auto* name = f.find("general.name");
    // (key bytes, then u32 type and u64 length before the value's bytes).
    const uint8_t* base = reinterpret_cast<const uint8_t*>(name->s.data()) -
                          (testing::find_unique(bytes, "general.name") + 12 + 4 + 8);
    for (const auto& t : f.tensors()) {
      EXPECT_GE(t.data, base);
      EXPECT_LE(t.data + t.nbytes, base + bytes.size());
      EXPECT_EQ(static_cast<size_t>(t.data - base) % alignment, 0u) << t.name;
      EXPECT_EQ(t.offset % alignment, 0u);
    }
    const TensorInfo* ta = f.find_tensor("a");
    const TensorInfo* tb = f.find_tensor("b");
    ASSERT_TRUE(ta && tb);
    EXPECT_EQ(ta->nbytes, 12u);
    EXPECT_EQ(tb->nbytes, 102u);
    EXPECT_EQ(tb->offset, alignment);  // a's 12 bytes padded to one alignment unit
    EXPECT_EQ(std::vector<uint8_t>(ta->data, ta->data + ta->nbytes), a);
    EXPECT_EQ(std::vector<uint8_t>(tb->data, tb->data + tb->nbytes), b);
    EXPECT_EQ(tb->dims, (std::vector<int64_t>{32, 3}));
    EXPECT_EQ(tb->n_elements(), 96);
    EXPECT_EQ(tb->rows(), 3);
    EXPECT_EQ(bytes.size() % alignment, 0u);  // the last tensor is padded too
  }
}

TEST(GgufWriter, output_is_deterministic_and_setting_a_key_again_replaces_it_in_place) {
  auto make = [] {
    Writer w;
    w.set_u32("a", 1);
    w.set_string("b", "x");
    w.set_u32("a", 2);
    w.add_tensor("t", tensor::DType::F32, {2}, testing::filled(8, 0));
    return w.serialize();
  };
  auto one = make();
  EXPECT_EQ(one, make());
  ScratchDir dir;
  File f = open_ok(testing::write_bytes(dir.path("m.gguf"), one));
  ASSERT_EQ(f.metadata().size(), 2u);
  EXPECT_EQ(f.metadata()[0].first, "a");
  EXPECT_EQ(*f.get_int("a"), 2);
}

TEST(GgufWriter, version_2_files_are_read_like_version_3) {
  ScratchDir dir;
  auto bytes = testing::small_writer().serialize();
  testing::patch<uint32_t>(bytes, 4, 2);
  File f = open_ok(testing::write_bytes(dir.path("v2.gguf"), bytes));
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(*f.get_string("general.architecture"), "llama");
}

TEST(GgufWriter, write_creates_the_file_atomically_and_reports_a_bad_directory) {
  ScratchDir dir;
  auto w = testing::small_writer();
  ASSERT_TRUE(w.write(dir.path("m.gguf")).ok());
  auto again = w.write(dir.path("no/such/dir/m.gguf"));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.message().find("no/such/dir/m.gguf"), std::string::npos) << again.message();
}

}  // namespace
}  // namespace ember::gguf
