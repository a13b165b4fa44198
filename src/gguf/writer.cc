// GGUF writer: encodes each value as it is set (type tag + payload), then lays out the header,
// metadata, tensor infos and the aligned data section in serialize().
#include "gguf/writer.h"

#include <cstring>

#include "base/file.h"

namespace ember::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;
constexpr uint32_t kVersion = 3;
constexpr uint64_t kDefaultAlignment = 32;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// Payload only (no type tag).
void put_payload(std::vector<uint8_t>& out, const Value& v) {
  switch (v.type) {
    case ValueType::U8:
      put<uint8_t>(out, static_cast<uint8_t>(v.u));
      break;
    case ValueType::I8:
      put<int8_t>(out, static_cast<int8_t>(v.i));
      break;
    case ValueType::U16:
      put<uint16_t>(out, static_cast<uint16_t>(v.u));
      break;
    case ValueType::I16:
      put<int16_t>(out, static_cast<int16_t>(v.i));
      break;
    case ValueType::U32:
      put<uint32_t>(out, static_cast<uint32_t>(v.u));
      break;
    case ValueType::I32:
      put<int32_t>(out, static_cast<int32_t>(v.i));
      break;
    case ValueType::U64:
      put<uint64_t>(out, v.u);
      break;
    case ValueType::I64:
      put<int64_t>(out, v.i);
      break;
    case ValueType::F32:
      put<float>(out, static_cast<float>(v.f));
      break;
    case ValueType::F64:
      put<double>(out, v.f);
      break;
    case ValueType::BOOL:
      put<uint8_t>(out, v.u ? 1 : 0);
      break;
    case ValueType::STRING:
      put_string(out, v.s);
      break;
    case ValueType::ARRAY:
      put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
      put<uint64_t>(out, v.size());
      for (size_t k = 0; k < v.size(); ++k) {
        const Value e = v.at(k);
        EMBER_ASSERT(e.type == v.elem_type);
        put_payload(out, e);
      }
      break;
  }
}

std::vector<uint8_t> encode(const Value& v) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  put_payload(out, v);
  return out;
}

Value scalar(ValueType t) {
  Value v;
  v.type = t;
  return v;
}

uint64_t align_up(uint64_t n, uint64_t a) {
  return (n + a - 1) / a * a;
}

}  // namespace

void Writer::set_value(const std::string& key, const Value& v) {
  auto encoded = encode(v);
  for (auto& kv : kv_) {
    if (kv.key == key) {
      kv.encoded = std::move(encoded);
      return;
    }
  }
  kv_.push_back(Kv{key, std::move(encoded)});
}

void Writer::set_u32(const std::string& key, uint32_t v) {
  Value x = scalar(ValueType::U32);
  x.u = v;
  set_value(key, x);
}

void Writer::set_i32(const std::string& key, int32_t v) {
  Value x = scalar(ValueType::I32);
  x.i = v;
  set_value(key, x);
}

void Writer::set_u64(const std::string& key, uint64_t v) {
  Value x = scalar(ValueType::U64);
  x.u = v;
  set_value(key, x);
}

void Writer::set_i64(const std::string& key, int64_t v) {
  Value x = scalar(ValueType::I64);
  x.i = v;
  set_value(key, x);
}

void Writer::set_f32(const std::string& key, float v) {
  Value x = scalar(ValueType::F32);
  x.f = v;
  set_value(key, x);
}

void Writer::set_f64(const std::string& key, double v) {
  Value x = scalar(ValueType::F64);
  x.f = v;
  set_value(key, x);
}

void Writer::set_bool(const std::string& key, bool v) {
  Value x = scalar(ValueType::BOOL);
  x.u = v ? 1 : 0;
  set_value(key, x);
}

void Writer::set_string(const std::string& key, const std::string& v) {
  Value x = scalar(ValueType::STRING);
  x.s = v;
  set_value(key, x);
}

void Writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  Value x = scalar(ValueType::ARRAY);
  x.elem_type = ValueType::STRING;
  x.arr.reserve(v.size());
  for (const auto& s : v) {
    Value e = scalar(ValueType::STRING);
    e.s = s;
    x.arr.push_back(e);
  }
  set_value(key, x);
}

void Writer::set_f32_array(const std::string& key, const std::vector<float>& v) {
  Value x = scalar(ValueType::ARRAY);
  x.elem_type = ValueType::F32;
  x.arr.reserve(v.size());
  for (float f : v) {
    Value e = scalar(ValueType::F32);
    e.f = f;
    x.arr.push_back(e);
  }
  set_value(key, x);
}

void Writer::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  Value x = scalar(ValueType::ARRAY);
  x.elem_type = ValueType::I32;
  x.arr.reserve(v.size());
  for (int32_t i : v) {
    Value e = scalar(ValueType::I32);
    e.i = i;
    x.arr.push_back(e);
  }
  set_value(key, x);
}

void Writer::add_tensor(const std::string& name, tensor::DType type, std::vector<int64_t> dims,
                        std::vector<uint8_t> bytes) {
  EMBER_ASSERT(!dims.empty() && dims.size() <= 4);
  int64_t rows = 1;
  for (size_t k = 0; k < dims.size(); ++k) {
    EMBER_ASSERT(dims[k] > 0);
    if (k > 0) rows *= dims[k];
  }
  EMBER_ASSERT(dims[0] % tensor::block_elems(type) == 0);
  EMBER_ASSERT(bytes.size() == tensor::row_bytes(type, dims[0]) * static_cast<size_t>(rows));
  for (const auto& t : tensors_) EMBER_ASSERT(t.name != name);
  tensors_.push_back(Tensor{name, type, std::move(dims), std::move(bytes)});
}

std::vector<uint8_t> Writer::serialize() const {
  EMBER_ASSERT(alignment_ > 0 && (alignment_ & (alignment_ - 1)) == 0);
  std::vector<Kv> kvs = kv_;
  bool has_alignment_key = false;
  for (const auto& kv : kvs) has_alignment_key |= kv.key == "general.alignment";
  if (!has_alignment_key && alignment_ != kDefaultAlignment) {
    Value a = scalar(ValueType::U32);
    a.u = alignment_;
    kvs.push_back(Kv{"general.alignment", encode(a)});
  }

  std::vector<uint8_t> out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, kVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs.size());
  for (const auto& kv : kvs) {
    put_string(out, kv.key);
    out.insert(out.end(), kv.encoded.begin(), kv.encoded.end());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += align_up(t.bytes.size(), alignment_);
  }
  if (!tensors_.empty()) out.resize(align_up(out.size(), alignment_), 0);
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize(align_up(out.size(), alignment_), 0);
  }
  return out;
}

Status Writer::write(const std::string& path) const {
  auto bytes = serialize();
  return write_file_atomic(path, bytes);
}

}  // namespace ember::gguf
