// GGUF writer (version 3), used by fixtures and tests. Builds the file in memory and writes it
// atomically. Output is deterministic: keys and tensors appear in the order they were first set
// (setting a key again replaces its value in place), tensor data is laid out in order, each
// tensor padded to the alignment (the last one too, as llama.cpp expects). An alignment other
// than 32 is recorded as 'general.alignment' unless the caller set that key itself (tests do,
// to produce deliberately broken files; they also patch serialize()'s bytes directly).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "gguf/reader.h"

namespace ember::gguf {

class Writer {
 public:
  explicit Writer(uint64_t alignment = 32) : alignment_(alignment) {}

  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_i64(const std::string& key, int64_t v);
  void set_f64(const std::string& key, double v);
  // Any value, including the small integer types and nested arrays (strings are copied from
  // Value::s; an ARRAY's elements must all have its elem_type).
  void set_value(const std::string& key, const Value& v);

  // dims in GGUF order (dims[0] innermost); bytes.size() must equal the type's row bytes * rows.
  void add_tensor(const std::string& name, tensor::DType type, std::vector<int64_t> dims,
                  std::vector<uint8_t> bytes);

  std::vector<uint8_t> serialize() const;
  Status write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    std::vector<uint8_t> encoded;  // type tag + payload
  };
  struct Tensor {
    std::string name;
    tensor::DType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> bytes;
  };
  uint64_t alignment_;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace ember::gguf
