// The tier budgets of `answer` and their machine-derived defaults.
#include "cmd/cache-flags.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/kv/cache-policy.h"

namespace ragkv::cli {

std::optional<uint64_t> available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("MemAvailable:")) continue;
    std::istringstream ss(line.substr(13));
    uint64_t kib = 0;
    if (ss >> kib) return kib * 1024;
  }
  return std::nullopt;
}

KvTierConfig CacheFlags::config(const Backend& backend) const {
  constexpr uint64_t GiB = uint64_t(1) << 30;
  KvTierConfig c;
  c.policy = parse_cache_policy(policy);
  const uint64_t device = backend.kind() == DeviceKind::cpu ? 0 : GiB;
  const uint64_t host = std::min<uint64_t>(available_memory_bytes().value_or(4 * GiB) / 4, 8 * GiB);
  c.budgets.bytes = {device_bytes.value_or(device), host_bytes.value_or(host), disk_bytes.value_or(0)};
  return c;
}

std::string CacheFlags::load_control_for(const Backend& backend) const {
  if (load_control != "auto") return load_control;
  return backend.kind() == DeviceKind::cpu ? "off" : "on";
}

}  // namespace ragkv::cli
