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

  // Drops this process's mapped pages that [p, p + n) touches (rounded out to whole pages,
  // clamped to the mapping; p must lie in it). The bytes stay in the page cache and are read
  // back in if touched again, so this changes RSS, never what a read returns: safe for any
  // range because the mapping is read-only. Where the kernel maps the page cache in 2 MiB
  // folios, one byte read maps the whole 2 MiB, and releasing any page of it drops them all.
  void release(const uint8_t* p, size_t n) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one.
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);

// The streaming form: write() appends to `path`.tmp.<pid>; commit() fsyncs it, renames it over
// `path` and fsyncs the directory. Destroyed without commit (an error, a deadline), the temp
// file is removed and `path` is untouched; killed mid-write, `path` is untouched too.
class AtomicFileWriter {
 public:
  static Result<AtomicFileWriter> create(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& o) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  ~AtomicFileWriter();

  Status write(std::span<const uint8_t> bytes);
  Status commit();
  const std::string& temp_path() const { return tmp_; }

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd)
      : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_, tmp_;
  int fd_ = -1;
};

Result<std::string> read_file(const std::string& path);

}  // namespace ember
