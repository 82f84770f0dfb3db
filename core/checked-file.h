// Checked files for INDEX_DIR: a 64-bit checksum (the XXH64 algorithm), whole-file atomic
// writes (temporary name + fsync + rename), and a reader that checks bounds before every read
// and names the file in its errors.
//
// The binary files of an index share one frame (STYLE.md convention 8):
//   [magic, 8 bytes][u32 version][body ...][u64 XXH64 of every byte before it]
// read_checked_file verifies size, magic, version and checksum before anyone parses the body;
// the body is then parsed with ByteReader, which checks bounds on every read.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace ragkv {

// Streaming XXH64 (same values as the reference xxHash library).
class Checksum64 {
 public:
  explicit Checksum64(uint64_t seed = 0);
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  uint64_t digest() const;

 private:
  uint64_t seed_, total_ = 0;
  uint64_t v_[4];
  std::array<unsigned char, 32> buf_{};
  size_t buf_len_ = 0;
};

uint64_t checksum64(const void* data, size_t n, uint64_t seed = 0);
inline uint64_t checksum64(std::string_view s) { return checksum64(s.data(), s.size()); }
std::string checksum_hex(uint64_t h);  // 16 lowercase hex digits

// Whole file into memory; Error naming the file when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Writes the concatenation of parts to path atomically: a temporary file beside it is written,
// fsynced and renamed over path, then the directory is fsynced. Readers see the old file or the
// whole new one, never a part. Error naming the file on any failure (the temporary is removed).
void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> parts);
inline void write_file_atomic(const std::filesystem::path& path, std::initializer_list<std::string_view> parts) {
  write_file_atomic(path, std::span<const std::string_view>(parts.begin(), parts.size()));
}

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
