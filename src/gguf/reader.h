// GGUF reader: a bounds-checked, zero-copy view of a memory-mapped GGUF file (versions 2 and 3).
// Invariants once open() succeeds: every metadata value and every tensor's bytes lie inside the
// file; tensor data is aligned to general.alignment; no two tensors overlap. A hostile or broken
// file is an Error naming the file and the problem, never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "base/result.h"
#include "tensor/dtype.h"

namespace ember::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars live in the numeric fields; strings point into the mapping.
// An ARRAY's elements are read through size() and at(i). An array built in memory (the writer,
// fixtures, tests) holds them in `arr`; an array of scalars or strings read from a file leaves
// `arr` empty and keeps them packed where they lie in the mapping, decoded by at() as the
// parser decodes them: a 262,144-entry vocabulary (tokens, scores, types) costs 2 MB of string
// offsets instead of 57 MB of Values, in every process that opens the model. Arrays of arrays
// are held in `arr` either way (each inner array packed in turn).
struct Value {
  ValueType type = ValueType::U8;
  ValueType elem_type = ValueType::U8;   // for ARRAY
  uint64_t u = 0;                        // unsigned integers and BOOL
  int64_t i = 0;                         // signed integers
  double f = 0;                          // F32 / F64
  std::string_view s;                    // STRING
  std::vector<Value> arr;                // ARRAY built in memory, or of arrays
  const uint8_t* packed = nullptr;       // ARRAY read from a file: its first element's bytes
  uint64_t packed_count = 0;             // and how many
  std::vector<uint64_t> packed_offsets;  // STRING elements: where each starts from `packed`, and
                                         // where the last ends (packed_count + 1 entries)

  bool is_integer() const;
  bool is_float() const { return type == ValueType::F32 || type == ValueType::F64; }
  size_t size() const { return packed != nullptr ? packed_count : arr.size(); }
  Value at(size_t k) const;  // element k < size() of an ARRAY
};

struct TensorInfo {
  std::string name;
  tensor::DType type = tensor::DType::F32;
  std::vector<int64_t> dims;  // GGUF order: dims[0] is the innermost (contiguous) dimension
  uint64_t offset = 0;        // relative to the start of the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;

  int64_t n_elements() const;
  int64_t rows() const;  // product of dims[1..]
};

class File {
 public:
  static Result<File> open(const std::string& path);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Byte offset of the data section (tensor offsets are relative to it); a multiple of alignment.
  uint64_t data_offset() const { return data_offset_; }

  // Metadata, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Drops this process's mapped pages of the tensor data section (MappedFile::release): for a
  // reader done with it, e.g. a model that runs from copies of its weights, so the pages it
  // read do not stay in its RSS. What is read again afterwards is simply mapped again.
  void release_tensor_data() const {
    if (data_offset_ < map_.size()) {
      map_.release(map_.data() + data_offset_, map_.size() - data_offset_);
    }
  }

  // Typed accessors: an Error names the file, the key and what was expected, e.g.
  // "m.gguf: metadata 'llama.block_count' is a string, expected an integer".
  Result<std::string> get_string(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;   // any integer type
  Result<double> get_float(std::string_view key) const;  // F32/F64 or any integer
  Result<bool> get_bool(std::string_view key) const;
  Result<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_float_array(std::string_view key) const;
  Result<std::vector<int64_t>> get_int_array(std::string_view key) const;
  // Defaults when the key is absent (still an Error when present with the wrong type).
  Result<std::string> get_string_or(std::string_view key, std::string def) const;
  Result<int64_t> get_int_or(std::string_view key, int64_t def) const;
  Result<double> get_float_or(std::string_view key, double def) const;
  Result<bool> get_bool_or(std::string_view key, bool def) const;

 private:
  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Human-readable dump for `ember inspect`: header, metadata (long arrays abbreviated), tensor
// table (name, type, dims, offset, bytes) and a per-type summary.
std::string describe(const File& f);

}  // namespace ember::gguf
