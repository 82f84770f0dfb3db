// Checked files for INDEX_DIR: XXH64 checksum, atomic writes, bounds-checked reads (see the
// header for the frame every binary index file shares).
#include "core/checked-file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <vector>

#include "core/error.h"

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

std::string errno_text() { return std::strerror(errno); }

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

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open for reading: {}", path.string(), errno_text());
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail("{}: read error", path.string());
  return s;
}

void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> parts) {
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp.string(), errno_text());
  auto give_up = [&](const char* what) {
    const std::string err = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("{}: {} failed: {}", path.string(), what, err);
  };
  for (std::string_view part : parts) {
    const char* p = part.data();
    size_t left = part.size();
    while (left > 0) {
      const ssize_t w = ::write(fd, p, left);
      if (w < 0) {
        if (errno == EINTR) continue;
        give_up("write");
      }
      p += w;
      left -= size_t(w);
    }
  }
  if (::fsync(fd) != 0) give_up("fsync");
  if (::close(fd) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    fail("{}: close failed: {}", path.string(), err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = errno_text();
    ::unlink(tmp.c_str());
    fail("{}: rename from {} failed: {}", path.string(), tmp.string(), err);
  }
  // Make the rename itself durable (best effort: some filesystems refuse fsync on directories).
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

std::string_view ByteReader::bytes(size_t n, const char* what) {
  if (n > remaining())
    fail("{}: truncated or corrupt: {} needs {} bytes at offset {}, only {} left", name_, what, n, pos_,
         remaining());
  std::string_view v = data_.substr(pos_, n);
  pos_ += n;
  return v;
}

void ByteReader::expect_end() const {
  if (remaining() != 0) fail("{}: corrupt: {} unexpected bytes after offset {}", name_, remaining(), pos_);
}

CheckedFile read_checked_file(const std::filesystem::path& path, std::string_view magic, uint32_t version) {
  return check_frame(read_file(path), path.string(), magic, version);
}

CheckedFile check_frame(std::string bytes, const std::string& name, std::string_view magic, uint32_t version) {
  CheckedFile f;
  f.bytes = std::move(bytes);
  if (f.bytes.size() < magic.size() + 4 + 8 || magic.size() != 8)
    fail("{}: truncated: {} bytes, a {} file has at least 20", name, f.bytes.size(), magic);
  if (std::string_view(f.bytes).substr(0, 8) != magic)
    fail("{}: not a {} file (bad magic)", name, magic.substr(0, magic.find('\0')));
  uint32_t v;
  std::memcpy(&v, f.bytes.data() + 8, 4);
  if (v != version) fail("{}: format version {}, this build reads version {}", name, v, version);
  const size_t body_end = f.bytes.size() - 8;
  std::memcpy(&f.checksum, f.bytes.data() + body_end, 8);
  const uint64_t want = checksum64(f.bytes.data(), body_end);
  if (want != f.checksum)
    fail("{}: checksum mismatch (stored {}, computed {}): the file is corrupt or truncated", name,
         checksum_hex(f.checksum), checksum_hex(want));
  return f;
}

uint64_t write_checked_file(const std::filesystem::path& path, std::string_view magic, uint32_t version,
                            std::initializer_list<std::string_view> body_parts) {
  if (magic.size() != 8) fail("internal: magic for {} must be 8 bytes", path.string());
  std::string head(magic);
  append_pod(head, version);
  Checksum64 c;
  c.update(head);
  for (std::string_view part : body_parts) c.update(part);
  const uint64_t sum = c.digest();
  std::string tail;
  append_pod(tail, sum);
  std::vector<std::string_view> all;
  all.push_back(head);
  for (std::string_view part : body_parts) all.push_back(part);
  all.push_back(tail);
  write_file_atomic(path, std::span<const std::string_view>(all));
  return sum;
}

}  // namespace ragkv
