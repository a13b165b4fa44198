// describe(): the human-readable dump behind `ember inspect`. Long strings are cut at a UTF-8
// character boundary and long arrays show their first few elements, so the dump of a model with
// a 262k-token vocabulary stays a screenful of metadata.
#include <map>
#include <string>

#include "gguf/reader.h"

namespace ember::gguf {
namespace {

constexpr size_t kMaxStringBytes = 64;
constexpr size_t kArrayHead = 3;   // elements shown for a long array
constexpr size_t kShortArray = 8;  // arrays up to this length are shown whole

std::string quote(std::string_view s) {
  size_t cut = s.size();
  if (cut > kMaxStringBytes) {
    cut = kMaxStringBytes;
    while (cut > 0 && (static_cast<uint8_t>(s[cut]) & 0xC0) == 0x80) --cut;  // continuation byte
  }
  std::string out = "\"";
  for (size_t k = 0; k < cut; ++k) {
    unsigned char ch = static_cast<unsigned char>(s[k]);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          out += fmt::format("\\x{:02x}", ch);
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  out += "\"";
  if (cut < s.size()) out += fmt::format("... ({} bytes)", s.size());
  return out;
}

std::string format_value(const Value& v) {
  switch (v.type) {
    case ValueType::U8:
    case ValueType::U16:
    case ValueType::U32:
    case ValueType::U64:
      return fmt::format("{}", v.u);
    case ValueType::I8:
    case ValueType::I16:
    case ValueType::I32:
    case ValueType::I64:
      return fmt::format("{}", v.i);
    case ValueType::F32:
      return fmt::format("{}", static_cast<float>(v.f));
    case ValueType::F64:
      return fmt::format("{}", v.f);
    case ValueType::BOOL:
      return v.u ? "true" : "false";
    case ValueType::STRING:
      return quote(v.s);
    case ValueType::ARRAY: {
      const size_t n = v.size();
      const bool abbreviate = n > kShortArray;
      std::string out = "[";
      if (abbreviate) out += fmt::format("{} {}s: ", n, value_type_name(v.elem_type));
      const size_t shown = abbreviate ? kArrayHead : n;
      for (size_t k = 0; k < shown; ++k) {
        if (k) out += ", ";
        out += format_value(v.at(k));
      }
      if (abbreviate) out += ", ... ";
      out += "]";
      return out;
    }
  }
  return "?";
}

std::string type_label(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(value_type_name(v.type));
  return fmt::format("array[{}]", value_type_name(v.elem_type));
}

std::string human_bytes(uint64_t n) {
  if (n < 1024) return fmt::format("{} B", n);
  if (n < 1024 * 1024) return fmt::format("{:.1f} KiB", static_cast<double>(n) / 1024);
  if (n < uint64_t{1} << 30) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1 << 20));
  return fmt::format("{:.2f} GiB", static_cast<double>(n) / (uint64_t{1} << 30));
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t k = 0; k < dims.size(); ++k) s += fmt::format("{}{}", k ? " x " : "", dims[k]);
  return s;
}

}  // namespace

std::string describe(const File& f) {
  std::string out;
  out += fmt::format("{}: GGUF v{}, alignment {}, {} tensors, {} metadata keys, data at byte {}\n",
                     f.path(), f.version(), f.alignment(), f.tensors().size(), f.metadata().size(),
                     f.data_offset());

  out += "\nmetadata:\n";
  size_t key_w = 0;
  for (const auto& [k, v] : f.metadata()) key_w = std::max(key_w, k.size());
  for (const auto& [k, v] : f.metadata()) {
    out += fmt::format("  {:<{}}  {:<14} {}\n", k, key_w, type_label(v), format_value(v));
  }

  out += "\ntensors:\n";
  size_t name_w = 4;
  for (const auto& t : f.tensors()) name_w = std::max(name_w, t.name.size());
  out += fmt::format("  {:<{}}  {:<5}  {:<24}  {:>12}  {:>12}\n", "name", name_w, "type", "dims",
                     "offset", "bytes");
  struct Sum {
    size_t count = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string_view, Sum> by_type;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    out += fmt::format("  {:<{}}  {:<5}  {:<24}  {:>12}  {:>12}\n", t.name, name_w,
                       tensor::dtype_name(t.type), dims_text(t.dims), t.offset, t.nbytes);
    auto& s = by_type[tensor::dtype_name(t.type)];
    s.count++;
    s.bytes += t.nbytes;
    total += t.nbytes;
  }

  out += "\nsummary:\n";
  for (const auto& [name, s] : by_type) {
    out += fmt::format("  {}: {} tensors, {}\n", name, s.count, human_bytes(s.bytes));
  }
  out += fmt::format("  total: {} tensors, {}\n", f.tensors().size(), human_bytes(total));
  return out;
}

}  // namespace ember::gguf
