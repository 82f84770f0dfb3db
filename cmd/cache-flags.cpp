// --cache-policy and the tier budgets of `answer`, and their machine-derived defaults.
#include "cmd/cache-flags.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/kv/cache-policy.h"

namespace ragkv::cli {

void CacheFlags::add_to(CLI::App* app) {
  app->add_option("--cache-policy", policy, "Replacement policy of the memory tiers and the tree's disk files: pgdsf (RAGCache), gdsf or lru")
      ->check(CLI::IsMember(cache_policy_names()))
      ->capture_default_str();
  app->add_option("--device-budget", device_bytes, "Bytes of chunk KV kept in device memory between queries (e.g. 512MiB; default 0 on the CPU, 1GiB on a GPU)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--host-budget", host_bytes, "Bytes of chunk KV kept in host memory between queries (e.g. 2GiB; default a quarter of the available memory, at most 8GiB)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--disk-budget", disk_bytes, "Bytes of knowledge-tree chain nodes written to the store and kept there (default 0: none written)")
      ->transform(CLI::AsSizeValue(false));
  app->add_option("--cost-profile", cost_profile, "PGDSF's prefill cost T(cached, computed tokens) and, with --load-control, the tiers' read rates: read from this file when they were measured for this model and device, else measured now (a few seconds) and written there; without it, T is fitted to this run's prefills and the loading controller measures each run");
  app->add_option("--load-control", load_control, "Loading controller (CacheBlend 5, Cache-Craft Eq. 16): from the measured compute speed and tier read rates, per cached chunk load or recompute, the loader's preload depth and the recompute ratio hidden under loading; on: carried out, report: only decided and reported (metrics load_control), off: every cache is loaded")
      ->check(CLI::IsMember({"off", "report", "on"}))
      ->capture_default_str();
  app->add_flag("--raise-ratio", raise_ratio, "With --load-control on: blend recomputes max(--recompute-ratio, hidden ratio), the most that still hides under loading (CacheBlend 5.1)");
}

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

}  // namespace ragkv::cli
