// The values of the cache manager's flags of `answer` (RAGCache §5.1, DESIGN.md §4 "Cache
// management"; declared in cmd/flag-table.cpp): the replacement policy and a byte budget per tier,
// with defaults taken from this machine.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/backend/backend.h"
#include "core/kv/kv-tiers.h"

namespace ragkv::cli {

struct CacheFlags {
  std::string policy = "pgdsf";
  std::optional<uint64_t> device_bytes, host_bytes, disk_bytes;
  std::string cost_profile;  // PGDSF's T(α, β) grid and the tiers' read rates: read, or measured now and written there
  std::string load_control = "auto";  // the loading controller: auto, off, report (decide only) or on
  bool raise_ratio = false;          // with it on: blend's r raised to the hidden ratio
  // The budgets: given ones as given; by default the device tier 0 on the CPU backend (its memory
  // is host memory, which the host tier already budgets) and 1 GiB on a GPU, host memory a quarter
  // of the memory available now (at most 8 GiB), the disk 0 (chain nodes are not persisted).
  KvTierConfig config(const Backend& backend) const;
  // --load-control with auto resolved: on with a GPU backend (loading from disk can be slower than
  // recomputing there, issue 40), off on the CPU (where reading nearly always wins and measuring
  // the machine costs a prefill grid per run).
  std::string load_control_for(const Backend& backend) const;
};

// MemAvailable of /proc/meminfo in bytes; nullopt where it cannot be read.
std::optional<uint64_t> available_memory_bytes();

}  // namespace ragkv::cli
