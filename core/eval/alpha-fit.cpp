// fit_alpha: the smallest α whose craft run passes the gate (Cache-Craft Eq. 13).
#include "core/eval/alpha-fit.h"

#include <algorithm>

namespace ragkv {

AlphaFit fit_alpha(const nlohmann::json& summary, const std::vector<GateCheck>& checks,
                   std::vector<AlphaCandidate> candidates) {
  std::sort(candidates.begin(), candidates.end(),
            [](const AlphaCandidate& a, const AlphaCandidate& b) { return a.alpha < b.alpha; });
  AlphaFit fit;
  fit.table = nlohmann::json::array();
  for (const AlphaCandidate& c : candidates) {
    bool passed = true;  // every threshold of the mode (none when the gate is off)
    for (const GateCheck& g : checks)
      if (g.mode == c.mode) passed = passed && g.pass;
    const nlohmann::json& m = summary.at("modes").at(c.mode);
    nlohmann::json row = {{"mode", c.mode}, {"alpha", c.alpha}, {"passed", passed},
                          {"compute_fraction", m.value("compute_fraction", nlohmann::json())}};
    if (m.contains("craft")) row["mean_cfo"] = m["craft"]["mean_cfo"];
    fit.table.push_back(row);
    if (passed && !fit.alpha) fit.alpha = c.alpha;
  }
  return fit;
}

}  // namespace ragkv
