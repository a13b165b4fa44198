// Files: read-only memory maps and atomic writes (temp file, fsync, rename, fsync directory).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "base/result.h"

namespace ember {

// A read-only, private mapping of a whole file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

Result<std::string> read_file(const std::string& path);

}  // namespace ember
