// The loading controller (CacheBlend §5.1; Cache-Craft §3.4.2, Eq. 16 and Algorithm 2): from the
// measured compute speed (the T(α, β) profile, core/rag/cost-profile.h) and the measured read rate
// of each tier (core/kv/tier-read-rates.h), per prompt
//   * per cached segment, whether loading its KV beats computing it in place from scratch (on a
//     fast GPU, prefill beats reading from an SSD below some 8–17k tokens; on a CPU, reading
//     nearly always wins);
//   * the preload depth L_p: how many layers the loader reads ahead so that loading hides under
//     compute (Cache-Craft Eq. 16);
//   * the hidden ratio: the largest blend recompute ratio whose compute still hides under the
//     loading (CacheBlend §5.1: r with T_recompute(r) = T_load); reported, and applied only on
//     request (r = max(r_user, r_hidden), CacheBlend's max with its r*).
// decide() is pure arithmetic on its inputs; candidates() and apply() connect it to a plan.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kv/cache-policy.h"
#include "core/kv/segment-kv.h"
#include "core/kv/tier-read-rates.h"
#include "core/rag/plan.h"
#include "core/rag/prompt.h"

namespace ragkv {

// A cached segment of a prompt, as the controller sees it.
struct LoadCandidate {
  size_t segment = 0;   // index into the prompt's segments
  std::string id;       // its chunk id ("@prefix" for the instruction prefix)
  KvTier tier = KvTier::disk;
  uint64_t bytes = 0;   // f16 K and V of every layer
  int64_t begin = 0, tokens = 0;
  double resident = 1;  // disk: share of its file in the page cache
  // The share of its token-layers the mode recomputes anyway when it is loaded: fixed + (1 −
  // fixed)·r when `scales_with_ratio` (blend: its check layers compute every candidate, the
  // others r of them), else `fixed` (reuse and exact hits 0, craft its fix tokens / tokens).
  double fixed = 0;
  bool scales_with_ratio = false;
};

struct SegmentLoadDecision {
  LoadCandidate c;
  double load_ms = 0;     // predicted: its bytes from its tier into the prompt's rows
  double compute_ms = 0;  // predicted: its tokens computed from scratch at its position
  bool recompute = false;
};

struct LoadControl {
  std::vector<SegmentLoadDecision> segments;  // one per cached segment, in prompt order
  bool pipelined = true;        // loading overlaps compute layer by layer (the sparse modes)
  double load_ms = 0;           // predicted reading of the segments still loaded
  double compute_ms = 0;        // predicted compute of the prefill after the decisions
  double prefill_ms = 0;        // predicted prefill: max(load, compute) + one layer's load when pipelined, else the sum
  int preload_depth = 1;        // Cache-Craft Eq. 16
  std::optional<double> hidden_ratio;  // CacheBlend §5.1 (pipelined, with repositioned segments loaded)
  double recompute_ratio = 0;   // r the prefill runs with (the user's, or raised to hidden_ratio)
  int loader_depth = 0;         // layers the loader was allowed ahead (apply(); 0: not applied)
  bool applied = false;         // the decisions were carried out (else only reported)
  size_t recomputed() const;
  nlohmann::json to_json() const;
};

class LoadingController {
 public:
  // cost must have a measured grid (Error otherwise: the controller does not guess).
  LoadingController(TierReadRates rates, PrefillCostModel cost, int n_layer);

  // Predicted time (ms) to bring a candidate's KV from its tier (CacheBlend §5.1 footnote 6:
  // PerTokenKVSize × L / Throughput(device)).
  double load_ms(const LoadCandidate& c) const { return rates_.read_ms(c.tier, c.bytes, c.resident); }
  // Predicted time (ms) to compute `tokens` tokens after `begin` others on every layer: the
  // marginal prefill cost, n × ∂T/∂β at α = begin, of the profile.
  double compute_ms(int64_t begin, int64_t tokens) const;
  int n_layer() const { return n_layer_; }
  const TierReadRates& rates() const { return rates_; }

  // The decisions for a prompt's cached segments (in prompt order), given `base_compute_ms` of
  // rows it computes on every layer anyway (the question, segments without a cache), the user's
  // recompute ratio r, and whether loading overlaps compute:
  //  pipelined (the sparse modes, CacheBlend §5 / Cache-Craft §3.4.2): prefill ≈ max(A, C) + A/L
  //    with A the loaded segments' read time and C the compute; a segment's load hides under
  //    compute, so it is recomputed only when that shortens the prefill — greedily, the best gain
  //    first, while the prediction drops (one segment alone on an idle pipeline: recompute exactly
  //    when compute_ms < load_ms, the papers' rule).
  //  dense (prefix: the exact path is loaded before the rest computes): prefill = A + C over a
  //    leading run of loaded segments; the run ends where computing the rest is cheaper.
  // raise_ratio: r = max(r, hidden_ratio) (CacheBlend §5.1).
  LoadControl decide(const std::vector<LoadCandidate>& cached, double base_compute_ms, double recompute_ratio,
                     bool pipelined, bool raise_ratio = false) const;

 private:
  TierReadRates rates_;
  PrefillCostModel cost_;
  int n_layer_;
};

// The decisions of many prompts summed (answer's summary): decisions per tier, the mean preload
// depth and hidden ratio, and the predicted load and prefill times beside the measured ones.
class LoadControlSummary {
 public:
  void add(const LoadControl& c, double measured_load_ms, double measured_prefill_ms);
  bool empty() const { return prompts_ == 0; }
  nlohmann::json to_json() const;

 private:
  size_t prompts_ = 0, segments_ = 0, recomputed_ = 0, n_hidden_ = 0;
  size_t load_[3] = {0, 0, 0}, recompute_[3] = {0, 0, 0};  // per KvTier
  double depth_ = 0, hidden_ = 0, ratio_ = 0;
  double predicted_load_ = 0, predicted_prefill_ = 0, measured_load_ = 0, measured_prefill_ = 0;
};

// A plan's cached segments as candidates (reading the page-cache residency of disk-tier files),
// and the compute of the rows it computes anyway.
struct PlanLoad {
  std::vector<LoadCandidate> cached;
  double base_compute_ms = 0;
  bool pipelined = true;
};
PlanLoad plan_load(const LoadingController& ctl, const RagPrompt& prompt, const PrefillPlan& plan);

// Carries the decisions out on the plan: segments to recompute lose their cache (computed in
// place, not counted as hits), the loader may read max(L_p, min_depth) layers ahead, and r is
// raised to control.recompute_ratio. Sets control.applied and loader_depth.
void apply_load_control(LoadControl& control, PrefillPlan& plan, int min_depth);

}  // namespace ragkv
