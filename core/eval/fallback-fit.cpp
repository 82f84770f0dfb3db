// fit_fallback: the cheapest of auto's margin-fallback rules that passes the gate.
#include "core/eval/fallback-fit.h"

#include <limits>

namespace ragkv {

FallbackFit fit_fallback(const nlohmann::json& summary, const std::vector<GateCheck>& checks,
                         const std::vector<FallbackCandidate>& candidates) {
  FallbackFit fit;
  fit.table = nlohmann::json::array();
  double best = std::numeric_limits<double>::infinity();
  for (const FallbackCandidate& c : candidates) {
    bool passed = true;
    for (const GateCheck& g : checks)
      if (g.mode == c.mode) passed = passed && g.pass;
    const nlohmann::json& m = summary.at("modes").at(c.mode);
    const double compute = m.value("compute_fraction", std::numeric_limits<double>::infinity());
    fit.table.push_back({{"mode", c.mode},
                         {"rule", c.rule.active() ? c.rule.name() : "0"},
                         {"passed", passed},
                         {"compute_fraction", m.value("compute_fraction", nlohmann::json())},
                         {"ttft_ratio", m.value("ttft_ratio", nlohmann::json())},
                         {"fallbacks", m.value("fallbacks", 0.0)}});
    if (passed && compute < best) {
      best = compute;
      fit.rule = c.rule;
    }
  }
  return fit;
}

}  // namespace ragkv
