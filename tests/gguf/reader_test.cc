// Reader: typed accessors, describe(), and one test per kind of broken file. Every broken file
// is made from a good serialized buffer, and every error must name the file and the problem.
#include "gguf/reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf_test_util.h"

namespace ember::gguf {
namespace {

using testing::find_unique;
using ::testing::HasSubstr;
using testing::patch;
using testing::ScratchDir;
using testing::tensor_info_at;

class GgufReader : public ::testing::Test {
 protected:
  // Writes `bytes` and expects open() to fail with a message naming the file and `problem`.
  void expect_rejected(const std::vector<uint8_t>& bytes, const std::string& problem) {
    std::string path = testing::write_bytes(dir_.path("broken.gguf"), bytes);
    auto f = File::open(path);
    ASSERT_FALSE(f.ok()) << "expected: " << problem;
    EXPECT_THAT(f.message(), HasSubstr(path + ": "));
    EXPECT_THAT(f.message(), HasSubstr(problem));
  }
  File open_ok(const std::vector<uint8_t>& bytes) {
    auto f = File::open(testing::write_bytes(dir_.path("good.gguf"), bytes));
    EXPECT_TRUE(f.ok()) << f.message();
    EMBER_ASSERT(f.ok());
    return std::move(f).value();
  }
  std::vector<uint8_t> good_ = testing::small_writer().serialize();
  ScratchDir dir_;
};

// Offset of the u32 value-type tag of metadata `key`.
size_t value_type_at(const std::vector<uint8_t>& b, std::string_view key) {
  return find_unique(b, key) + key.size();
}

TEST_F(GgufReader, opens_the_small_file_and_finds_its_tensors) {
  File f = open_ok(good_);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[1].name, "tensor_wb");
  EXPECT_EQ(f.tensors()[1].type, tensor::DType::Q8_0);
  EXPECT_EQ(f.find_tensor("tensor_wc")->nbytes, 6u);
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
  EXPECT_EQ(f.find("missing"), nullptr);
}

TEST_F(GgufReader, typed_accessors_name_the_file_key_and_expected_type) {
  File f = open_ok(good_);
  const std::string p = f.path();
  EXPECT_EQ(*f.get_int("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.get_float("llama.eps")), 1e-5f);
  EXPECT_EQ(*f.get_float("llama.block_count"), 2.0);  // integers widen to float
  EXPECT_EQ(*f.get_bool("llama.flag"), true);
  EXPECT_EQ(*f.get_int_or("absent", 7), 7);
  EXPECT_EQ(*f.get_string_or("absent", "d"), "d");
  EXPECT_EQ(*f.get_float_or("absent", 0.5), 0.5);
  EXPECT_EQ(*f.get_bool_or("absent", true), true);
  EXPECT_EQ(*f.get_int_or("llama.block_count", 7), 2);

  EXPECT_EQ(f.get_int("general.architecture").message(),
            p + ": metadata 'general.architecture' is a string, expected an integer");
  EXPECT_EQ(f.get_string("x").message(), p + ": metadata 'x' not found");
  EXPECT_EQ(f.get_string("llama.block_count").message(),
            p + ": metadata 'llama.block_count' is a u32, expected a string");
  EXPECT_EQ(f.get_bool("llama.eps").message(),
            p + ": metadata 'llama.eps' is an f32, expected a bool");
  EXPECT_EQ(f.get_int("llama.flag").message(),
            p + ": metadata 'llama.flag' is a bool, expected an integer");
  EXPECT_EQ(f.get_string_array("tok.types").message(),
            p + ": metadata 'tok.types' is an array of i32, expected an array of string");
  EXPECT_EQ(f.get_int_array("tok.tokens").message(),
            p + ": metadata 'tok.tokens' is an array of string, expected an array of integers");
  EXPECT_EQ(f.get_float_array("general.architecture").message(),
            p + ": metadata 'general.architecture' is a string, expected an array of numbers");
  // A present key of the wrong type is still an error when a default is given.
  EXPECT_FALSE(f.get_int_or("general.architecture", 1).ok());
  EXPECT_FALSE(f.get_string_or("llama.flag", "x").ok());
}

TEST_F(GgufReader, get_int_rejects_a_u64_too_large_for_int64) {
  Writer w;
  w.set_u64("big", 1ull << 63);
  File f = open_ok(w.serialize());
  EXPECT_THAT(f.get_int("big").message(),
              HasSubstr("'big' value 9223372036854775808 does not fit"));
}

TEST_F(GgufReader, describe_abbreviates_long_arrays_and_strings_and_summarizes_types) {
  Writer w;
  std::vector<std::string> toks;
  for (int k = 0; k < 20; ++k) toks.push_back("t" + std::to_string(k));
  w.set_string_array("tokenizer.ggml.tokens", toks);
  w.set_i32_array("short", {1, 2, 3});
  w.set_string("tmpl", std::string(100, 'x') + "\n");
  w.add_tensor("w1", tensor::DType::F32, {4, 2}, testing::filled(32, 0));
  w.add_tensor("w2", tensor::DType::F32, {2}, testing::filled(8, 0));
  w.add_tensor("q", tensor::DType::Q8_0, {32}, testing::filled(34, 0));
  File f = open_ok(w.serialize());
  std::string d = describe(f);
  EXPECT_THAT(d, HasSubstr("GGUF v3, alignment 32, 3 tensors, 3 metadata keys"));
  EXPECT_THAT(d, HasSubstr("[20 strings: \"t0\", \"t1\", \"t2\", ... ]"));
  EXPECT_THAT(d, HasSubstr("[1, 2, 3]"));
  EXPECT_THAT(d, HasSubstr("\"" + std::string(64, 'x') + "\"... (101 bytes)"));
  EXPECT_THAT(d, ::testing::ContainsRegex("w1 +F32 +4 x 2 +0 +32"));
  EXPECT_THAT(d, ::testing::ContainsRegex("q +Q8_0 +32 +64 +34"));
  EXPECT_THAT(d, HasSubstr("F32: 2 tensors, 40 B"));
  EXPECT_THAT(d, HasSubstr("Q8_0: 1 tensors, 34 B"));
}

TEST_F(GgufReader, a_missing_file_is_an_error_naming_it) {
  auto f = File::open(dir_.path("nope.gguf"));
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.message(), HasSubstr("nope.gguf: cannot open"));
}

TEST_F(GgufReader, rejects_a_file_too_short_for_the_magic) {
  expect_rejected({}, "too short to be a GGUF file (0 bytes)");
  expect_rejected({'G', 'G', 'U'}, "too short to be a GGUF file (3 bytes)");
}

TEST_F(GgufReader, rejects_bad_magic) {
  auto b = good_;
  b[0] = 'X';
  expect_rejected(b, "not a GGUF file (bad magic");
}

TEST_F(GgufReader, rejects_versions_other_than_2_and_3) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    auto b = good_;
    patch<uint32_t>(b, 4, v);
    expect_rejected(b, fmt::format("unsupported GGUF version {}", v));
  }
}

TEST_F(GgufReader, rejects_a_truncated_header) {
  expect_rejected(std::vector<uint8_t>(good_.begin(), good_.begin() + 20),
                  "truncated at byte 16 in the header: metadata count needs 8 bytes, 4 left");
}

TEST_F(GgufReader, rejects_counts_that_cannot_fit_in_the_file_before_allocating) {
  auto b = good_;
  patch<uint64_t>(b, 8, uint64_t{1} << 60);
  expect_rejected(b, "header claims 1152921504606846976 tensors, which cannot fit");
  b = good_;
  patch<uint64_t>(b, 16, ~uint64_t{0});
  expect_rejected(b, "header claims 18446744073709551615 metadata entries, which cannot fit");
  // An array count: the u64 after the element type of 'tok.types'.
  b = good_;
  patch<uint64_t>(b, value_type_at(b, "tok.types") + 8, uint64_t{1} << 40);
  expect_rejected(b, "metadata 'tok.types' claims 1099511627776 elements of type i32");
  // A string length: the value of 'general.architecture'.
  b = good_;
  patch<uint64_t>(b, value_type_at(b, "general.architecture") + 4, uint64_t{1} << 50);
  expect_rejected(b, "in metadata 'general.architecture': string value claims 1125899906842624");
  // A key length.
  b = good_;
  patch<uint64_t>(b, find_unique(b, "llama.eps") - 8, 1000000);
  expect_rejected(b, "in metadata entry #2: key claims 1000000 bytes");
  // A tensor name length.
  b = good_;
  patch<uint64_t>(b, find_unique(b, "tensor_wb") - 8, ~uint64_t{0} - 3);
  expect_rejected(b, "in tensor info #1: name claims 18446744073709551612 bytes");
}

TEST_F(GgufReader, rejects_an_unknown_value_type) {
  auto b = good_;
  patch<uint32_t>(b, value_type_at(b, "llama.block_count"), 13);
  expect_rejected(b, "metadata 'llama.block_count' has unknown value type 13");
  b = good_;
  patch<uint32_t>(b, value_type_at(b, "tok.types") + 4, 99);
  expect_rejected(b, "metadata 'tok.types' has unknown array element type 99");
}

TEST_F(GgufReader, rejects_duplicate_keys) {
  Writer w;
  w.set_u32("k.one", 1);
  w.set_u32("k.two", 2);
  auto b = w.serialize();
  std::memcpy(b.data() + find_unique(b, "k.two"), "k.one", 5);
  expect_rejected(b, "duplicate metadata key 'k.one'");
}

TEST_F(GgufReader, rejects_arrays_nested_too_deep) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = ValueType::U8;
  for (int d = 0; d < 9; ++d) {
    Value outer;
    outer.type = ValueType::ARRAY;
    outer.elem_type = ValueType::ARRAY;
    outer.arr.push_back(v);
    v = outer;
  }
  Writer w;
  w.set_value("deep", v);
  expect_rejected(w.serialize(), "metadata 'deep' nests arrays more than 8 deep");
}

TEST_F(GgufReader, rejects_an_unknown_tensor_type_naming_the_tensor_and_id) {
  auto b = good_;
  patch<uint32_t>(b, tensor_info_at(b, "tensor_wb", 2).type, 77);
  expect_rejected(b, "tensor 'tensor_wb' has type unknown (ggml type id 77)");
}

// A quantization ggml has and ember does not read (IQ4_XS) is named, with the types ember takes.
TEST_F(GgufReader, rejects_an_unsupported_ggml_type_naming_it_and_the_supported_types) {
  auto b = good_;
  patch<uint32_t>(b, tensor_info_at(b, "tensor_wb", 2).type, 23);
  expect_rejected(b,
                  "tensor 'tensor_wb' has type IQ4_XS (ggml type id 23), which ember cannot "
                  "read (weights may be F32, F16, BF16, Q4_0");
}

TEST_F(GgufReader, rejects_zero_or_more_than_four_dimensions) {
  auto b = good_;
  patch<uint32_t>(b, tensor_info_at(b, "tensor_wa", 2).n_dims, 0);
  expect_rejected(b, "tensor 'tensor_wa' has 0 dimensions (expected 1 to 4)");
  b = good_;
  patch<uint32_t>(b, tensor_info_at(b, "tensor_wa", 2).n_dims, 5);
  expect_rejected(b, "tensor 'tensor_wa' has 5 dimensions (expected 1 to 4)");
}

TEST_F(GgufReader, rejects_a_zero_or_negative_dimension) {
  auto b = good_;
  patch<uint64_t>(b, tensor_info_at(b, "tensor_wa", 2).dims + 8, 0);
  expect_rejected(b, "tensor 'tensor_wa' has invalid dimension 1 = 0");
  b = good_;
  patch<int64_t>(b, tensor_info_at(b, "tensor_wa", 2).dims, -4);
  expect_rejected(b, "tensor 'tensor_wa' has invalid dimension 0 = -4");
}

TEST_F(GgufReader, rejects_an_element_count_that_overflows) {
  auto b = good_;
  auto at = tensor_info_at(b, "tensor_wa", 2);
  patch<uint64_t>(b, at.dims, uint64_t{1} << 32);
  patch<uint64_t>(b, at.dims + 8, uint64_t{1} << 31);
  expect_rejected(b, "tensor 'tensor_wa' element count overflows");
}

TEST_F(GgufReader, rejects_a_byte_size_that_overflows) {
  auto b = good_;
  auto at = tensor_info_at(b, "tensor_wa", 2);  // F32: 4 bytes per element
  patch<uint64_t>(b, at.dims, uint64_t{1} << 31);
  patch<uint64_t>(b, at.dims + 8, uint64_t{1} << 31);
  expect_rejected(b, "tensor 'tensor_wa' byte size overflows");
}

TEST_F(GgufReader, rejects_a_row_length_not_a_multiple_of_the_block_size) {
  auto b = good_;
  patch<uint64_t>(b, tensor_info_at(b, "tensor_wb", 2).dims, 48);
  expect_rejected(b, "tensor 'tensor_wb' row length 48 is not a multiple of Q8_0's block size 32");
}

TEST_F(GgufReader, rejects_tensor_data_past_the_end_of_the_file) {
  auto b = good_;
  patch<uint64_t>(b, tensor_info_at(b, "tensor_wc", 1).offset, 4096);
  expect_rejected(b, "tensor 'tensor_wc' data (6 bytes at offset 4096) ends at byte");
  expect_rejected(b, "past the end of the file");
  b = good_;
  patch<uint64_t>(b, tensor_info_at(b, "tensor_wc", 1).offset, ~uint64_t{0} & ~uint64_t{31});
  expect_rejected(b, "ends beyond 2^64, past the end of the file");
}

TEST_F(GgufReader, rejects_a_misaligned_tensor_offset) {
  auto b = good_;
  patch<uint64_t>(b, tensor_info_at(b, "tensor_wb", 2).offset, 33);
  expect_rejected(b, "tensor 'tensor_wb' offset 33 is not a multiple of the alignment 32");
}

TEST_F(GgufReader, rejects_overlapping_tensors) {
  auto b = good_;
  patch<uint64_t>(b, tensor_info_at(b, "tensor_wb", 2).offset, 0);
  expect_rejected(b, "overlap");
  expect_rejected(b, "'tensor_wa' (bytes 0..32)");
}

TEST_F(GgufReader, rejects_duplicate_tensor_names) {
  auto b = good_;
  std::memcpy(b.data() + find_unique(b, "tensor_wc"), "tensor_wa", 9);
  expect_rejected(b, "duplicate tensor name 'tensor_wa'");
}

TEST_F(GgufReader, rejects_a_bad_alignment_value) {
  for (uint32_t a : {0u, 3u, 48u}) {
    auto w = testing::small_writer();
    w.set_u32("general.alignment", a);
    expect_rejected(w.serialize(), fmt::format("bad alignment {} in 'general.alignment'", a));
  }
  auto w = testing::small_writer();
  w.set_string("general.alignment", "32");
  expect_rejected(w.serialize(), "metadata 'general.alignment' is a string, expected an integer");
  w = testing::small_writer();
  w.set_i32("general.alignment", -32);
  expect_rejected(w.serialize(), "bad alignment -32");
}

TEST_F(GgufReader, honours_an_alignment_key_of_another_integer_type) {
  Writer w(64);
  w.set_u64("general.alignment", 64);
  w.add_tensor("t", tensor::DType::F32, {3}, testing::filled(12, 0));
  w.add_tensor("u", tensor::DType::F32, {3}, testing::filled(12, 0));
  File f = open_ok(w.serialize());
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.find_tensor("u")->offset, 64u);
}

}  // namespace
}  // namespace ember::gguf
