// KvTiers: device and host copies keyed by the store's content address, the store below them.
#include "kv/kv-tiers.h"

#include "util/error.h"

namespace ragkv {

std::string KvTiers::address(const ChunkKvMeta& key) const { return store_.chunk_path(key).filename().string(); }

std::shared_ptr<const SegmentKv> KvTiers::find(const ChunkKvMeta& key) const {
  if (store_.foreign()) return nullptr;
  const std::string a = address(key);
  for (const auto* tier : {&device_, &host_})
    if (const auto it = tier->find(a); it != tier->end()) return it->second;
  std::optional<ChunkKvReader> file = store_.open_chunk(key);
  if (!file) return nullptr;
  return std::make_shared<DiskSegmentKv>(std::move(*file));
}

void KvTiers::place(const ChunkKvMeta& key, KvTier tier, Backend* backend) {
  if (tier == KvTier::disk) return;  // the store holds every cache there already
  auto& held = tier == KvTier::device ? device_ : host_;
  const std::string a = address(key);
  if (held.count(a)) return;
  std::optional<ChunkKvReader> file = store_.open_chunk(key);
  if (!file) fail("{}: no cache of chunk '{}' to place in {} memory", store_.dir().string(), key.chunk_id, kv_tier_name(tier));
  if (tier == KvTier::device) {
    if (!backend) fail("internal: placing chunk '{}' in device memory needs the backend", key.chunk_id);
    held[a] = DeviceSegmentKv::load(*backend, *file);
  } else {
    held[a] = HostSegmentKv::load(*file);
  }
}

void KvTiers::drop(const ChunkKvMeta& key) {
  const std::string a = address(key);
  device_.erase(a);
  host_.erase(a);
}

uint64_t KvTiers::bytes(KvTier tier) const {
  if (tier == KvTier::disk) return 0;
  uint64_t b = 0;
  for (const auto& [a, kv] : tier == KvTier::device ? device_ : host_) b += kv->bytes();
  return b;
}

}  // namespace ragkv
