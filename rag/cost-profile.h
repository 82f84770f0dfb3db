// The prefill cost profile of PGDSF (RAGCache §5.1: "profiles the LLM prefill time with varying
// cached and non-cached token lengths offline and uses bilinear interpolation"): T(α, β) measured
// on this machine with this model and backend on a small grid, kept in a JSON file for later runs.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "kv/cache-policy.h"
#include "model/model.h"

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

}  // namespace ragkv
