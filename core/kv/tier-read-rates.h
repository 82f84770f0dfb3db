// How fast chunk KV reaches a prompt from each tier on this machine (CacheBlend §5's "storage
// device's speed (which is measured offline)"; Cache-Craft §3.4.2's T_load): f16 KV bytes
// delivered per millisecond, measured through the calls the fusor makes (core/kv/segment-kv.h,
// core/rag/fusor.cpp's installer) — a device-tier copy, a host-tier upload, and a disk-tier read of real
// store files (pread, checksum, decode) both from the page cache and with the file's pages
// dropped first (posix_fadvise DONTNEED; the share still resident afterwards is recorded, since
// the OS may ignore the advice).
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/backend/backend.h"
#include "core/kv/kv-store.h"
#include "core/kv/segment-kv.h"

namespace ragkv {

struct TierReadRates {
  // MB/s (10^6 bytes of f16 KV per second); 0: not measured.
  double device_mb_s = 0;       // a copy within the backend's memory (device tier → prompt rows)
  double host_mb_s = 0;         // an upload from host memory into the backend (host tier → prompt rows)
  double disk_cached_mb_s = 0;  // reading a store file from the page cache (pread + checksum + decode)
  double disk_cold_mb_s = 0;    // the same after dropping the file's pages
  double disk_cold_resident = 0;  // share of those pages still resident when the cold read began
  std::string kv_dtype;           // the store encoding the disk rates were measured on ("": none)

  bool has_disk() const { return disk_cached_mb_s > 0 && disk_cold_mb_s > 0; }
  // Time (ms) to bring `bytes` of f16 KV from `tier` into a prompt's rows: a disk read (of which
  // `resident` comes from the page cache) is then uploaded as the host tier's KV is.
  double read_ms(KvTier tier, uint64_t bytes, double resident = 1.0) const;

  nlohmann::json to_json() const;
  static TierReadRates from_json(const nlohmann::json& j);  // Error naming the bad field
};

// Measures every rate on `backend`; the disk rates on up to `max_files` of the store's chunk files
// (none when store is null or holds none: has_disk() is false then). Best of `repetitions`.
// Drops those files' pages from the page cache for the cold read (other readers of the store
// only lose that cache).
TierReadRates measure_tier_read_rates(Backend& backend, const KvStore* store, size_t max_files = 8,
                                      int repetitions = 3);

}  // namespace ragkv
