// XXH64, the 64-bit checksum of every file ragkv writes (chunk KV layers, index files, headers),
// and its hex form used in content addresses and messages.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace ragkv
