// A store's signing key (`--store-key FILE`): with it, every chunk-KV file written carries an
// HMAC-SHA256 over all its bytes — header (model, chunk, token hash, context chain, position,
// encoding) and payload — and every file read must carry one made with the same key, or it is
// rejected (CacheFileError: counted and recomputed, never used). A writer without the key can
// then not plant KV under a chunk's key (KV-cache hijacking: position-independent caches are
// matched by their tokens, so KV computed in another context would otherwise be taken). Without
// a key nothing is signed or checked; such a plant is undetectable (docs/store.md).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/format/hmac.h"

namespace ragkv {

class StoreKey {
 public:
  // The file's bytes are the key (at least 16; `head -c 32 /dev/urandom > KEY` makes one). Error
  // naming the file when it cannot be read or is too short; a warning when others may read it.
  static StoreKey load(const std::filesystem::path& path);
  // load's key shared, or null for an empty path (no key: nothing signed or checked).
  static std::shared_ptr<const StoreKey> load_if_given(const std::string& path);
  explicit StoreKey(std::vector<uint8_t> bytes);

  HmacSha256 mac() const { return HmacSha256(bytes_); }
  // 8 hex digits that name the key in messages without revealing it.
  const std::string& id() const { return id_; }

 private:
  std::vector<uint8_t> bytes_;
  std::string id_;
};

}  // namespace ragkv
