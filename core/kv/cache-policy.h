// Replacement policies of the KV tiers (RAGCache §5.1; DESIGN.md §4 "Cache management"): how a
// cached node's priority is computed and how the prefill cost it saves is estimated.
//
//   PGDSF (RAGCache, Formula 2 with Formula 4's prefix-aware Cost/Size):
//     Priority = Clock + Frequency × Cost/Size, Cost/Size = (1/m) Σ_i Cost_i / NewSize_i
//     over the m requests that used the node without having it in this tier; Cost_i is what the
//     request paid for its non-cached tokens (the profiled prefill time T(α, β) with α cached and
//     β = NewSize_i computed tokens, or the time to read the node from a lower tier), so a node
//     that only the disk holds besides, and is cheap to read back, ranks below one that would be
//     recomputed.
//   GDSF (the baseline RAGCache compares with, §7.4): the same with Cost ∝ Size, i.e. Cost/Size = 1.
//   LRU: the least recently used node first.
// Clock (Formula 3): per tier, the largest priority evicted so far; a node's priority is set
// from its tier's clock whenever it is accessed.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ragkv {

enum class CachePolicy : uint8_t { pgdsf, gdsf, lru };
const char* cache_policy_name(CachePolicy p);
CachePolicy parse_cache_policy(const std::string& s);  // Error listing the policies
std::vector<std::string> cache_policy_names();

// T(α, β): the prefill time (ms) of β new tokens after α cached ones on this machine (RAGCache
// §5.1, Algorithm 1 lines 6–7). From a profile measured on a grid (bilinear interpolation inside
// it, the nearest edge cell's plane outside), else from a least-squares fit of
// T = c0 + c1·β + c2·α·β to the prefills observed so far, else β itself (a token is the unit).
class PrefillCostModel {
 public:
  // alphas, betas ascending, at least 2 each; ms[i][j] measured at (alphas[i], betas[j]).
  void set_grid(std::vector<double> alphas, std::vector<double> betas, std::vector<std::vector<double>> ms);
  bool has_grid() const { return !alphas_.empty(); }
  // An observed prefill: β tokens computed after α cached ones took ms.
  void observe(double alpha, double beta, double ms);
  size_t observations() const { return n_obs_; }
  double estimate_ms(double alpha, double beta) const;

  // Reading and writing rate per tier (ms per token) as measured; 0 until known.
  double load_ms_per_token(int tier) const { return load_ms_per_token_[size_t(tier)]; }
  void set_load_ms_per_token(int tier, double ms) { load_ms_per_token_[size_t(tier)] = ms; }

  nlohmann::json to_json() const;
  static PrefillCostModel from_json(const nlohmann::json& j);  // Error naming the bad field

 private:
  std::vector<double> alphas_, betas_;
  std::vector<std::vector<double>> ms_;
  // Normal equations of the fit (X'X, X'y) over x = (1, β, α·β).
  double xtx_[3][3] = {}, xty_[3] = {};
  size_t n_obs_ = 0;
  double load_ms_per_token_[3] = {0, 0, 0};  // device, host, disk
};

// Bilinear interpolation of f at (x, y) on a grid (RAGCache Algorithm 1, line 7); outside the
// grid the edge cell's bilinear form is extended.
double bilinear(const std::vector<double>& xs, const std::vector<double>& ys,
                const std::vector<std::vector<double>>& f, double x, double y);

}  // namespace ragkv
