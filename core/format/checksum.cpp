// XXH64 (Yann Collet's xxHash specification), streaming, with the reference library's values.
#include "core/format/checksum.h"

#include <fmt/format.h>

#include <cstring>

namespace ragkv {

namespace {

// XXH64 constants and steps (Yann Collet's xxHash specification).
constexpr uint64_t kP1 = 0x9E3779B185EBCA87ULL, kP2 = 0xC2B2AE3D27D4EB4FULL, kP3 = 0x165667B19E3779F9ULL,
                   kP4 = 0x85EBCA77C2B2AE63ULL, kP5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t xxh_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  return rotl(acc, 31) * kP1;
}
inline uint64_t xxh_merge(uint64_t acc, uint64_t v) {
  acc ^= xxh_round(0, v);
  return acc * kP1 + kP4;
}

}  // namespace

Checksum64::Checksum64(uint64_t seed) : seed_(seed), v_{seed + kP1 + kP2, seed + kP2, seed, seed - kP1} {}

void Checksum64::update(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += n;
  if (buf_len_ + n < 32) {
    if (n) std::memcpy(buf_.data() + buf_len_, p, n);
    buf_len_ += n;
    return;
  }
  auto stripe = [this](const unsigned char* s) {
    for (int i = 0; i < 4; ++i) v_[i] = xxh_round(v_[i], read64(s + 8 * i));
  };
  if (buf_len_) {
    const size_t fill = 32 - buf_len_;
    std::memcpy(buf_.data() + buf_len_, p, fill);
    stripe(buf_.data());
    p += fill;
    n -= fill;
    buf_len_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) stripe(p);
  if (n) std::memcpy(buf_.data(), p, n);
  buf_len_ = n;
}

uint64_t Checksum64::digest() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (uint64_t v : v_) h = xxh_merge(h, v);
  } else {
    h = seed_ + kP5;
  }
  h += total_;
  const unsigned char* p = buf_.data();
  size_t n = buf_len_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ xxh_round(0, read64(p)), 27) * kP1 + kP4;
  if (n >= 4) {
    h = rotl(h ^ (uint64_t(read32(p)) * kP1), 23) * kP2 + kP3;
    p += 4;
    n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (uint64_t(*p) * kP5), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

uint64_t checksum64(const void* data, size_t n, uint64_t seed) {
  Checksum64 c(seed);
  c.update(data, n);
  return c.digest();
}

std::string checksum_hex(uint64_t h) { return fmt::format("{:016x}", h); }

}  // namespace ragkv
