// Where a prompt finds a chunk cache (RAGCache §4, DESIGN.md §4 "Cache management"): device
// memory, then host memory, then the store on disk. Each lookup returns the segment's KV feed
// (kv/segment-kv.h) from the highest tier holding it, so hits are counted per tier where they
// happen. Copies are placed in the memory tiers explicitly (`place`); replacement policies and
// byte budgets build on this (RAGCache's PGDSF, Cache-Craft's f_r).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "kv/kv-store.h"
#include "kv/segment-kv.h"

namespace ragkv {

class KvTiers {
 public:
  explicit KvTiers(const KvStore& store) : store_(store) {}

  // key's KV from the highest tier that holds it; nullptr when none does (or the store belongs to
  // another model); CacheFileError when only the store has it and its file fails its header checks.
  std::shared_ptr<const SegmentKv> find(const ChunkKvMeta& key) const;
  // Keeps a verified copy of key's KV in host memory, or in `backend`'s memory for the device
  // tier; a no-op when that tier already holds it. Error when the store has no file for key;
  // CacheFileError when the file fails its checks (nothing is kept then).
  void place(const ChunkKvMeta& key, KvTier tier, Backend* backend = nullptr);
  // Drops key's copies from the memory tiers (e.g. after they failed to load).
  void drop(const ChunkKvMeta& key);
  uint64_t bytes(KvTier tier) const;  // bytes of KV held in a memory tier (0 for disk)
  const KvStore& store() const { return store_; }

 private:
  std::string address(const ChunkKvMeta& key) const;  // the content address in the store
  const KvStore& store_;
  std::map<std::string, std::shared_ptr<const SegmentKv>> device_, host_;
};

}  // namespace ragkv
