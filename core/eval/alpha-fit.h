// Cache-Craft's α from a validation split (cache-craft.txt Eq. 13): α* = argmin_α E[CFO_α]
// subject to the quality staying acceptable. CFO grows with α (Eq. 12), so α* is the smallest
// α tried whose craft run passes the gate (core/eval/gate.h) — "acceptable quality" is the gate's
// agreement with the baseline rather than the paper's gold F1, for the reason the gate gives.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/gate.h"

namespace ragkv {

struct AlphaCandidate {
  std::string mode;  // e.g. "craft@0.3"
  double alpha = 0;
};

struct AlphaFit {
  std::optional<double> alpha;  // none passed
  nlohmann::json table;         // per candidate: alpha, passed, mean CFO, compute (every pass)
};

// candidates in any order; a candidate passes when every check of its mode passes (vacuously when
// the gate's thresholds are all off).
AlphaFit fit_alpha(const nlohmann::json& summary, const std::vector<GateCheck>& checks,
                   std::vector<AlphaCandidate> candidates);

}  // namespace ragkv
