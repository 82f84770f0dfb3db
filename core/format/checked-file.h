// Checked binary files: a frame with magic, version and an XXH64 checksum, written atomically,
// and a reader that checks bounds before every read and names the file in its errors.
//
// The binary files of an index share one frame (STYLE.md convention 8):
//   [magic, 8 bytes][u32 version][body ...][u64 XXH64 of every byte before it]
// read_checked_file verifies size, magic, version and checksum before anyone parses the body;
// the body is then parsed with ByteReader, which checks bounds on every read.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/format/checksum.h"
#include "core/util/file-io.h"

namespace ragkv {

// Appends a plain-old-data value to a byte buffer (little-endian hosts, as everywhere in ragkv).
template <typename T>
void append_pod(std::string& out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Bounds-checked reads from a byte buffer; every error names the file and what was being read.
class ByteReader {
 public:
  ByteReader(std::string name, std::string_view data) : name_(std::move(name)), data_(data) {}

  template <typename T>
  T pod(const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    T v;
    std::memcpy(&v, bytes(sizeof(T), what).data(), sizeof(T));
    return v;
  }
  std::string_view bytes(size_t n, const char* what);  // Error if fewer than n bytes are left
  size_t pos() const { return pos_; }
  size_t remaining() const { return data_.size() - pos_; }
  void expect_end() const;  // Error if bytes are left over
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::string_view data_;
  size_t pos_ = 0;
};

// A framed file read whole and verified: `bytes` holds the file, body() the part between the
// version field and the checksum.
struct CheckedFile {
  std::string bytes;
  uint64_t checksum = 0;  // the trailing XXH64, as stored (and verified)
  std::string_view body() const { return std::string_view(bytes).substr(12, bytes.size() - 20); }
};
CheckedFile read_checked_file(const std::filesystem::path& path, std::string_view magic, uint32_t version);
// The same checks on bytes already read (name is the file, for errors).
CheckedFile check_frame(std::string bytes, const std::string& name, std::string_view magic, uint32_t version);
// Writes magic + version + body parts + checksum atomically; returns the checksum written.
uint64_t write_checked_file(const std::filesystem::path& path, std::string_view magic, uint32_t version,
                            std::initializer_list<std::string_view> body_parts);

}  // namespace ragkv
