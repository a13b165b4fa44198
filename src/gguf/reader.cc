// GGUF reader. Parsing goes through a Cursor that checks every read against the bytes left, so
// a broken file can only ever produce an Error. Counts read from the file are checked against
// the bytes that remain before anything is allocated for them.
#include "gguf/reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

namespace ember::gguf {
namespace {

// ggml's names for the type ids ember does not read (ggml.h's enum), so an error names the
// quantization a file uses (IQ4_XS, ...); ids ggml retired or never had read "unknown".
std::string_view ggml_type_name(uint32_t id) {
  static constexpr std::string_view kNames[] = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  "",      "",       "Q5_0", "Q5_1",    "Q8_0",
      "Q8_1",    "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",  "Q6_K",   "Q8_K", "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",   "I16",     "I32",
      "I64",     "F64",   "IQ1_M",  "BF16",  "",      "",       "",     "TQ1_0",   "TQ2_0",
      "",        "",      "",       "MXFP4", "NVFP4", "Q1_0",   "Q2_0"};
  if (id < std::size(kNames) && !kNames[id].empty()) return kNames[id];
  return "unknown";
}

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes little-endian");

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxArrayDepth = 8;        // deeper nesting is never legitimate; bounds recursion
// Elements of arrays of arrays become Values (~100 bytes each) and each string element costs an
// 8-byte offset; real files hold ~1-2M elements in total. The cap keeps a small hostile file
// from making us allocate many times its size.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
constexpr uint32_t kMaxDims = 4;

// Smallest encoding of one value of type t, used to reject counts that cannot fit.
uint64_t min_encoded_size(ValueType t) {
  switch (t) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::BOOL:
      return 1;
    case ValueType::U16:
    case ValueType::I16:
      return 2;
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::F32:
      return 4;
    case ValueType::U64:
    case ValueType::I64:
    case ValueType::F64:
      return 8;
    case ValueType::STRING:
      return 8;  // u64 length
    case ValueType::ARRAY:
      return 12;  // u32 type + u64 count
  }
  return 1;
}

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(ValueType::F64);
}

class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  size_t pos() const { return pos_; }
  const uint8_t* here() const { return data_ + pos_; }
  void skip(size_t n) { pos_ += n; }  // after need(n)
  size_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }
  // What is being parsed, for error messages ("metadata key #3", "tensor info 'x'").
  std::string context;

  Status need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return fail("{}: truncated at byte {} in {}: {} needs {} bytes, {} left", path_, pos_,
                  context, what, n, remaining());
    }
    return {};
  }

  template <typename T>
  Result<T> read(std::string_view what) {
    EMBER_TRY_STATUS(need(sizeof(T), what));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  Result<std::string_view> read_string(std::string_view what) {
    EMBER_TRY(uint64_t len, read<uint64_t>(what));
    if (len > remaining()) {
      return fail("{}: truncated at byte {} in {}: {} claims {} bytes, {} left", path_, pos_,
                  context, what, len, remaining());
    }
    std::string_view s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }

 private:
  const std::string& path_;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct ParseState {
  uint64_t array_elements = 0;
};

Status parse_value(Cursor& c, ValueType type, Value& out, int depth, ParseState& st);

Status parse_array(Cursor& c, Value& out, int depth, ParseState& st) {
  EMBER_TRY(uint32_t et, c.read<uint32_t>("array element type"));
  if (!valid_value_type(et)) {
    return fail("{}: {} has unknown array element type {}", c.path(), c.context, et);
  }
  out.elem_type = static_cast<ValueType>(et);
  if (out.elem_type == ValueType::ARRAY && depth + 1 >= kMaxArrayDepth) {
    return fail("{}: {} nests arrays more than {} deep", c.path(), c.context, kMaxArrayDepth);
  }
  EMBER_TRY(uint64_t count, c.read<uint64_t>("array count"));
  uint64_t min = min_encoded_size(out.elem_type);
  if (count > c.remaining() / min) {
    return fail("{}: {} claims {} elements of type {}, which cannot fit in the {} bytes left",
                c.path(), c.context, count, value_type_name(out.elem_type), c.remaining());
  }
  st.array_elements += count;
  if (st.array_elements > kMaxArrayElements) {
    return fail("{}: {} brings metadata array elements past the limit of {}", c.path(), c.context,
                kMaxArrayElements);
  }
  if (out.elem_type == ValueType::ARRAY) {
    out.arr.resize(static_cast<size_t>(count));
    for (auto& e : out.arr) EMBER_TRY_STATUS(parse_value(c, out.elem_type, e, depth + 1, st));
    return {};
  }
  // Scalars and strings stay where they are (Value::at decodes them); each is checked here.
  if (count == 0) return {};
  out.packed = c.here();
  out.packed_count = count;
  if (out.elem_type == ValueType::STRING) {
    out.packed_offsets.reserve(static_cast<size_t>(count) + 1);
    const size_t start = c.pos();
    for (uint64_t k = 0; k < count; ++k) {
      out.packed_offsets.push_back(c.pos() - start);
      EMBER_TRY(std::string_view ignored, c.read_string("string value"));
      (void)ignored;
    }
    out.packed_offsets.push_back(c.pos() - start);
    return {};
  }
  const uint64_t bytes = count * min_encoded_size(out.elem_type);  // count fits (checked above)
  EMBER_TRY_STATUS(c.need(bytes, "array elements"));
  c.skip(static_cast<size_t>(bytes));
  return {};
}

Status parse_value(Cursor& c, ValueType type, Value& out, int depth, ParseState& st) {
  out.type = type;
  switch (type) {
    case ValueType::U8: {
      EMBER_TRY(out.u, c.read<uint8_t>("u8 value"));
      return {};
    }
    case ValueType::I8: {
      EMBER_TRY(out.i, c.read<int8_t>("i8 value"));
      return {};
    }
    case ValueType::U16: {
      EMBER_TRY(out.u, c.read<uint16_t>("u16 value"));
      return {};
    }
    case ValueType::I16: {
      EMBER_TRY(out.i, c.read<int16_t>("i16 value"));
      return {};
    }
    case ValueType::U32: {
      EMBER_TRY(out.u, c.read<uint32_t>("u32 value"));
      return {};
    }
    case ValueType::I32: {
      EMBER_TRY(out.i, c.read<int32_t>("i32 value"));
      return {};
    }
    case ValueType::U64: {
      EMBER_TRY(out.u, c.read<uint64_t>("u64 value"));
      return {};
    }
    case ValueType::I64: {
      EMBER_TRY(out.i, c.read<int64_t>("i64 value"));
      return {};
    }
    case ValueType::F32: {
      EMBER_TRY(out.f, c.read<float>("f32 value"));
      return {};
    }
    case ValueType::F64: {
      EMBER_TRY(out.f, c.read<double>("f64 value"));
      return {};
    }
    case ValueType::BOOL: {
      EMBER_TRY(uint8_t b, c.read<uint8_t>("bool value"));
      out.u = b != 0;
      return {};
    }
    case ValueType::STRING: {
      EMBER_TRY(out.s, c.read_string("string value"));
      return {};
    }
    case ValueType::ARRAY:
      return parse_array(c, out, depth, st);
  }
  return fail("{}: {} has unknown value type {}", c.path(), c.context, static_cast<uint32_t>(type));
}

bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

std::string article_type(const Value& v) {
  if (v.type == ValueType::ARRAY) {
    return fmt::format("an array of {}", value_type_name(v.elem_type));
  }
  switch (v.type) {
    case ValueType::STRING:
      return "a string";
    case ValueType::BOOL:
      return "a bool";
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      return fmt::format("an {}", value_type_name(v.type));
    case ValueType::F32:
    case ValueType::F64:
      return fmt::format("an {}", value_type_name(v.type));
    default:
      return fmt::format("a {}", value_type_name(v.type));
  }
}

}  // namespace

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "unknown";
}

Value Value::at(size_t k) const {
  EMBER_ASSERT(type == ValueType::ARRAY && k < size());
  if (packed == nullptr) return arr[k];
  // Bytes the parser already checked, read within the element's own bounds: the same decoding
  // cannot fail.
  const bool str = elem_type == ValueType::STRING;
  const uint64_t size = min_encoded_size(elem_type);
  const uint64_t off = str ? packed_offsets[k] : k * size;
  const uint64_t len = str ? packed_offsets[k + 1] - off : size;
  static const std::string kPath = "(packed array element)";
  Cursor c(kPath, packed + off, static_cast<size_t>(len));
  Value e;
  ParseState st;
  const Status s = parse_value(c, elem_type, e, kMaxArrayDepth, st);
  EMBER_ASSERT(s.ok());
  return e;
}

bool Value::is_integer() const {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

int64_t TensorInfo::rows() const {
  int64_t n = 1;
  for (size_t k = 1; k < dims.size(); ++k) n *= dims[k];
  return n;
}

Result<File> File::open(const std::string& path) {
  File f;
  EMBER_TRY(f.map_, MappedFile::open(path));
  const uint8_t* base = f.map_.data();
  const size_t size = f.map_.size();
  Cursor c(f.map_.path(), base, size);

  c.context = "the header";
  if (size < 4) return fail("{}: too short to be a GGUF file ({} bytes)", path, size);
  EMBER_TRY(uint32_t magic, c.read<uint32_t>("magic"));
  if (magic != kMagic) {
    return fail("{}: not a GGUF file (bad magic 0x{:08x}, expected 0x{:08x} \"GGUF\")", path, magic,
                kMagic);
  }
  EMBER_TRY(f.version_, c.read<uint32_t>("version"));
  if (f.version_ != 2 && f.version_ != 3) {
    bool swapped = f.version_ == 0x02000000 || f.version_ == 0x03000000;
    return fail("{}: unsupported GGUF version {}{} (ember reads versions 2 and 3)", path,
                f.version_, swapped ? " (a big-endian file?)" : "");
  }
  EMBER_TRY(uint64_t tensor_count, c.read<uint64_t>("tensor count"));
  EMBER_TRY(uint64_t kv_count, c.read<uint64_t>("metadata count"));
  // Minimal encodings: a kv is key length (8) + type (4) + a 1-byte value; a tensor info is name
  // length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
  if (kv_count > c.remaining() / 13) {
    return fail("{}: header claims {} metadata entries, which cannot fit in the {} bytes left",
                path, kv_count, c.remaining());
  }
  if (tensor_count > c.remaining() / 32) {
    return fail("{}: header claims {} tensors, which cannot fit in the {} bytes left", path,
                tensor_count, c.remaining());
  }

  ParseState st;
  f.kv_.reserve(static_cast<size_t>(kv_count));
  for (uint64_t k = 0; k < kv_count; ++k) {
    c.context = fmt::format("metadata entry #{}", k);
    EMBER_TRY(std::string_view key, c.read_string("key"));
    c.context = fmt::format("metadata '{}'", key);
    if (f.kv_index_.count(key) != 0) return fail("{}: duplicate metadata key '{}'", path, key);
    EMBER_TRY(uint32_t type, c.read<uint32_t>("value type"));
    if (!valid_value_type(type)) {
      return fail("{}: metadata '{}' has unknown value type {}", path, key, type);
    }
    Value v;
    EMBER_TRY_STATUS(parse_value(c, static_cast<ValueType>(type), v, 0, st));
    f.kv_index_.emplace(std::string(key), f.kv_.size());
    f.kv_.emplace_back(std::string(key), std::move(v));
  }

  if (const Value* a = f.find("general.alignment")) {
    if (!a->is_integer()) {
      return fail("{}: metadata 'general.alignment' is {}, expected an integer", path,
                  article_type(*a));
    }
    bool negative = a->type == ValueType::I8 || a->type == ValueType::I16 ||
                    a->type == ValueType::I32 || a->type == ValueType::I64;
    uint64_t al = negative ? static_cast<uint64_t>(a->i) : a->u;
    if ((negative && a->i <= 0) || al == 0 || !std::has_single_bit(al) || al > (1u << 30)) {
      return fail("{}: bad alignment {} in 'general.alignment' (must be a nonzero power of two)",
                  path, negative ? fmt::format("{}", a->i) : fmt::format("{}", al));
    }
    f.alignment_ = al;
  }

  f.tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t t = 0; t < tensor_count; ++t) {
    c.context = fmt::format("tensor info #{}", t);
    TensorInfo ti;
    EMBER_TRY(std::string_view name, c.read_string("name"));
    ti.name = std::string(name);
    c.context = fmt::format("tensor info '{}'", ti.name);
    if (f.tensor_index_.count(name) != 0) {
      return fail("{}: duplicate tensor name '{}'", path, ti.name);
    }
    EMBER_TRY(uint32_t n_dims, c.read<uint32_t>("n_dims"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return fail("{}: tensor '{}' has {} dimensions (expected 1 to {})", path, ti.name, n_dims,
                  kMaxDims);
    }
    uint64_t n_elem = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      EMBER_TRY(uint64_t dim, c.read<uint64_t>("dimension"));
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail("{}: tensor '{}' has invalid dimension {} = {}", path, ti.name, d,
                    static_cast<int64_t>(dim));
      }
      if (mul_overflows(n_elem, dim, &n_elem) ||
          n_elem > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail("{}: tensor '{}' element count overflows", path, ti.name);
      }
      ti.dims.push_back(static_cast<int64_t>(dim));
    }
    EMBER_TRY(uint32_t type_id, c.read<uint32_t>("type"));
    auto dt = tensor::dtype_from_gguf(type_id);
    if (!dt) {
      return fail(
          "{}: tensor '{}' has type {} (ggml type id {}), which ember cannot read "
          "(weights may be F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, "
          "Q5_K or Q6_K)",
          path, ti.name, ggml_type_name(type_id), type_id);
    }
    ti.type = *dt;
    EMBER_TRY(ti.offset, c.read<uint64_t>("offset"));

    const uint64_t be = static_cast<uint64_t>(tensor::block_elems(ti.type));
    const uint64_t row = static_cast<uint64_t>(ti.dims[0]);
    if (row % be != 0) {
      return fail("{}: tensor '{}' row length {} is not a multiple of {}'s block size {}", path,
                  ti.name, row, tensor::dtype_name(ti.type), be);
    }
    uint64_t row_bytes = 0, nbytes = 0;
    if (mul_overflows(row / be, tensor::block_bytes(ti.type), &row_bytes) ||
        mul_overflows(row_bytes, n_elem / row, &nbytes) ||
        nbytes > std::numeric_limits<size_t>::max()) {
      return fail("{}: tensor '{}' byte size overflows", path, ti.name);
    }
    ti.nbytes = static_cast<size_t>(nbytes);
    f.tensor_index_.emplace(ti.name, f.tensors_.size());
    f.tensors_.push_back(std::move(ti));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t info_end = c.pos();
  const uint64_t data_start = (info_end + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  f.data_offset_ = data_start;
  for (auto& ti : f.tensors_) {
    if (ti.offset % f.alignment_ != 0) {
      return fail("{}: tensor '{}' offset {} is not a multiple of the alignment {}", path, ti.name,
                  ti.offset, f.alignment_);
    }
    const uint64_t avail = data_start <= size ? size - data_start : 0;
    if (data_start > size || ti.offset > avail || ti.nbytes > avail - ti.offset) {
      unsigned __int128 end = static_cast<unsigned __int128>(data_start) + ti.offset + ti.nbytes;
      std::string end_s = end > std::numeric_limits<uint64_t>::max()
                              ? std::string("beyond 2^64")
                              : fmt::format("at byte {}", static_cast<uint64_t>(end));
      return fail(
          "{}: tensor '{}' data ({} bytes at offset {}) ends {}, past the end of the file "
          "({} bytes)",
          path, ti.name, ti.nbytes, ti.offset, end_s, size);
    }
    ti.data = base + data_start + ti.offset;
  }

  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(f.tensors_.size());
  for (const auto& ti : f.tensors_) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const TensorInfo* a = by_offset[k - 1];
    const TensorInfo* b = by_offset[k];
    if (a->offset + a->nbytes > b->offset) {
      return fail("{}: tensors '{}' (bytes {}..{}) and '{}' (from byte {}) overlap", path, a->name,
                  a->offset, a->offset + a->nbytes, b->name, b->offset);
    }
  }
  return f;
}

const Value* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Error not_found(const File& f, std::string_view key) {
  return fail("{}: metadata '{}' not found", f.path(), key);
}

Error wrong_type(const File& f, std::string_view key, const Value& v, std::string_view expected) {
  return fail("{}: metadata '{}' is {}, expected {}", f.path(), key, article_type(v), expected);
}

// Integer value as int64, or an Error when it does not fit.
Result<int64_t> as_int(const File& f, std::string_view key, const Value& v) {
  switch (v.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      if (v.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail("{}: metadata '{}' value {} does not fit in a signed 64-bit integer", f.path(),
                    key, v.u);
      }
      return static_cast<int64_t>(v.u);
    default:
      return v.i;
  }
}

}  // namespace

Result<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (v->type != ValueType::STRING) return wrong_type(*this, key, *v, "a string");
  return std::string(v->s);
}

Result<int64_t> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (!v->is_integer()) return wrong_type(*this, key, *v, "an integer");
  return as_int(*this, key, *v);
}

Result<double> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (v->is_float()) return v->f;
  if (!v->is_integer()) return wrong_type(*this, key, *v, "a number");
  EMBER_TRY(int64_t i, as_int(*this, key, *v));
  return static_cast<double>(i);
}

Result<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (v->type != ValueType::BOOL) return wrong_type(*this, key, *v, "a bool");
  return v->u != 0;
}

Result<std::vector<std::string_view>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  if (v->type != ValueType::ARRAY || v->elem_type != ValueType::STRING) {
    return wrong_type(*this, key, *v, "an array of string");
  }
  std::vector<std::string_view> out;
  out.reserve(v->size());
  for (size_t k = 0; k < v->size(); ++k) out.push_back(v->at(k).s);
  return out;
}

Result<std::vector<float>> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  Value probe;
  probe.type = v->elem_type;
  if (v->type != ValueType::ARRAY || !(probe.is_float() || probe.is_integer())) {
    return wrong_type(*this, key, *v, "an array of numbers");
  }
  std::vector<float> out;
  out.reserve(v->size());
  for (size_t k = 0; k < v->size(); ++k) {
    const Value e = v->at(k);
    if (e.is_float()) {
      out.push_back(static_cast<float>(e.f));
    } else {
      EMBER_TRY(int64_t i, as_int(*this, key, e));
      out.push_back(static_cast<float>(i));
    }
  }
  return out;
}

Result<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return not_found(*this, key);
  Value probe;
  probe.type = v->elem_type;
  if (v->type != ValueType::ARRAY || !probe.is_integer()) {
    return wrong_type(*this, key, *v, "an array of integers");
  }
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (size_t k = 0; k < v->size(); ++k) {
    EMBER_TRY(int64_t i, as_int(*this, key, v->at(k)));
    out.push_back(i);
  }
  return out;
}

Result<std::string> File::get_string_or(std::string_view key, std::string def) const {
  if (!find(key)) return def;
  return get_string(key);
}

Result<int64_t> File::get_int_or(std::string_view key, int64_t def) const {
  if (!find(key)) return def;
  return get_int(key);
}

Result<double> File::get_float_or(std::string_view key, double def) const {
  if (!find(key)) return def;
  return get_float(key);
}

Result<bool> File::get_bool_or(std::string_view key, bool def) const {
  if (!find(key)) return def;
  return get_bool(key);
}

}  // namespace ember::gguf
