// HMAC-SHA256 (RFC 2104 over FIPS 180-4's SHA-256) through OpenSSL's libcrypto: the signatures of
// chunk-KV files in a store shared with writers that are not trusted (core/kv/store-key.h).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace ragkv {

using Sha256Digest = std::array<uint8_t, 32>;

class HmacSha256 {
 public:
  explicit HmacSha256(std::span<const uint8_t> key);
  ~HmacSha256();
  HmacSha256(const HmacSha256&) = delete;
  HmacSha256& operator=(const HmacSha256&) = delete;

  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Sha256Digest final();  // once

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Equal in time independent of where they differ (CRYPTO_memcmp).
bool digests_equal(const Sha256Digest& a, const Sha256Digest& b);

}  // namespace ragkv
