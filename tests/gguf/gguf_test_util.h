// Helpers for the GGUF tests: a scratch directory, a small valid file to break, and byte patching.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/reader.h"
#include "gguf/writer.h"

namespace ember::gguf::testing {

// A fresh directory under the test temp dir, removed on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    std::string tmpl = ::testing::TempDir() + "gguf_test_XXXXXX";
    EMBER_ASSERT(::mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string path(std::string_view name) const { return dir_ + "/" + std::string(name); }

 private:
  std::string dir_;
};

// Plain write (no fsync): the tests write thousands of small files.
inline std::string write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  EMBER_ASSERT(out.good());
  return path;
}

// Offset of the only occurrence of `s` in `bytes` (asserts it occurs exactly once).
inline size_t find_unique(const std::vector<uint8_t>& bytes, std::string_view s) {
  std::string_view hay(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  size_t pos = hay.find(s);
  EMBER_ASSERT(pos != std::string_view::npos);
  EMBER_ASSERT(hay.find(s, pos + 1) == std::string_view::npos);
  return pos;
}

template <typename T>
void patch(std::vector<uint8_t>& bytes, size_t pos, T v) {
  EMBER_ASSERT(pos + sizeof(T) <= bytes.size());
  std::memcpy(bytes.data() + pos, &v, sizeof(T));
}

inline std::vector<uint8_t> filled(size_t n, uint8_t seed) {
  std::vector<uint8_t> b(n);
  for (size_t k = 0; k < n; ++k) b[k] = static_cast<uint8_t>(seed + k * 7);
  return b;
}

// A small valid file with metadata of several kinds and three tensors (F32, Q8_0, F16).
// Tensor names and keys are unique byte strings so tests can locate and patch their fields.
inline Writer small_writer() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 2);
  w.set_f32("llama.eps", 1e-5f);
  w.set_bool("llama.flag", true);
  w.set_string_array("tok.tokens", {"<s>", "</s>", "hello"});
  w.set_i32_array("tok.types", {1, 2, 3});
  w.add_tensor("tensor_wa", tensor::DType::F32, {4, 2}, filled(32, 1));
  w.add_tensor("tensor_wb", tensor::DType::Q8_0, {32, 2}, filled(68, 2));
  w.add_tensor("tensor_wc", tensor::DType::F16, {3}, filled(6, 3));
  return w;
}

// Field offsets of a tensor info, found through the tensor's (unique) name.
struct TensorInfoAt {
  size_t n_dims, dims, type, offset;
};
inline TensorInfoAt tensor_info_at(const std::vector<uint8_t>& bytes, std::string_view name,
                                   uint32_t n_dims) {
  size_t p = find_unique(bytes, name) + name.size();
  return TensorInfoAt{p, p + 4, p + 4 + 8 * n_dims, p + 8 + 8 * n_dims};
}

}  // namespace ember::gguf::testing
