// Checked binary files: the frame (magic, version, body, XXH64) and bounds-checked reads.
#include "core/format/checked-file.h"

#include <cstring>
#include <vector>

#include "core/util/error.h"

namespace ragkv {

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
