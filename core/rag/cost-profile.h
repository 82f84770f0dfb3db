// The machine's cost profile, kept in one JSON file per model and backend for later runs:
//  * PGDSF's prefill cost (RAGCache §5.1: "profiles the LLM prefill time with varying cached and
//    non-cached token lengths offline and uses bilinear interpolation"): T(α, β) measured on a
//    small grid — also the loading controller's compute speed per token-layer;
//  * the tiers' read rates (core/kv/tier-read-rates.h), the loading controller's T_load (CacheBlend §5
//    "measured offline"), measured on first use by a command that has a store.
// File: {"model": fingerprint, "backend": name, "profile": T(α, β) grid, "tiers": read rates}.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/cache-policy.h"
#include "core/kv/kv-store.h"
#include "core/kv/tier-read-rates.h"
#include "core/model/model.h"

namespace ragkv {

// Times Model::forward of β tokens after α cached ones, for every (α, β) of the grid (the best of
// `repetitions` runs each), into a cost model with that grid.
PrefillCostModel profile_prefill_cost(const Model& model, const std::vector<double>& alphas,
                                      const std::vector<double>& betas, int repetitions = 2);

// The grid a profile is measured on. T(α, β) ≈ c0 + c1·β + c2·α + c3·α·β (a layer's compute is
// linear in β, its attention in α·β), which bilinear interpolation between four corners holds
// exactly: the default spans RAG prompts (up to 1,024 cached tokens, 32 to 512 computed).
struct ProfileGrid {
  std::vector<double> alphas{0, 1024}, betas{32, 512};
  int repetitions = 2;
};

// The profile in `path` when it was measured for this model (fingerprint) on this backend
// (name); else a new one measured now on `grid` and written there atomically. Error naming the
// file when it exists but cannot be read as a profile.
PrefillCostModel load_or_profile_prefill_cost(const std::filesystem::path& path, const Model& model,
                                              const std::string& model_fingerprint, bool* measured = nullptr,
                                              const ProfileGrid& grid = {});

struct MachineProfile {
  PrefillCostModel prefill;
  TierReadRates tiers;
  bool measured_prefill = false, measured_tiers = false;  // measured now (not read from the file)
};

// Both parts of the profile: those in `path` that were measured for this model (fingerprint) on
// this backend — the tier rates also only when they cover `store`'s disk (measured on a store of
// its KV encoding; a store with no chunk files needs no disk rates) — and the others measured now
// and the file rewritten atomically with both. An empty path: everything measured, nothing kept.
// Error naming the file when it exists but cannot be read as a profile.
MachineProfile load_or_profile_machine(const std::filesystem::path& path, const Model& model,
                                       const std::string& model_fingerprint, const KvStore* store,
                                       const ProfileGrid& grid = {});

}  // namespace ragkv
