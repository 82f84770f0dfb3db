// StoreKey: the signing key read from its file.
#include "core/kv/store-key.h"

#include <sys/stat.h>

#include <cstdio>

#include <fmt/format.h>

#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

namespace {
constexpr size_t kMinKeyBytes = 16;
}

StoreKey::StoreKey(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {
  if (bytes_.size() < kMinKeyBytes)
    fail("a store key of {} bytes is too short: at least {} (`head -c 32 /dev/urandom > KEY` makes one)", bytes_.size(),
         kMinKeyBytes);
  HmacSha256 h(bytes_);
  h.update("ragkv store key id");
  const Sha256Digest d = h.final();
  id_ = fmt::format("{:02x}{:02x}{:02x}{:02x}", d[0], d[1], d[2], d[3]);
}

StoreKey StoreKey::load(const std::filesystem::path& path) {
  std::string text;
  try {
    text = read_regular_file(path);
  } catch (const Error& e) {
    fail("--store-key: {}", e.what());
  }
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)))
    std::fprintf(stderr, "ragkv: warning: --store-key %s: others may read it (chmod 600 %s)\n", path.c_str(),
                 path.c_str());
  try {
    return StoreKey(std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const Error& e) {
    fail("--store-key {}: {}", path.string(), e.what());
  }
}

std::shared_ptr<const StoreKey> StoreKey::load_if_given(const std::string& path) {
  if (path.empty()) return nullptr;
  return std::make_shared<const StoreKey>(load(path));
}

}  // namespace ragkv
