// The margin fallback's rule for `auto`, fitted on an eval (`eval --fit-fallback`): of auto alone
// and auto under each rule tried (derived from the same records, core/eval/margin-fallback.h), the
// one with the least compute — every pass counted, the fallbacks' second prefills included — whose
// run passes the gate. The criterion is Cache-Craft's for α (cache-craft.txt Eq. 13): the least
// expected cost at acceptable quality. Stored in STORE/craft.json beside α; `answer`'s auto uses it
// where --fallback-margin is not given.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/gate.h"
#include "core/rag/fallback-rule.h"

namespace ragkv {

struct FallbackCandidate {
  std::string mode;   // "auto" or "auto fallback<R"
  FallbackRule rule;  // inactive for auto alone
};

struct FallbackFit {
  std::optional<FallbackRule> rule;  // none passed
  nlohmann::json table;              // per candidate: mode, rule, passed, compute, TTFT ratio, fallbacks
};

// checks: the gate's checks of the candidates' modes; a candidate passes when every check of its
// mode passes (vacuously when the gate's thresholds are all off). Ties in compute: the earlier
// candidate.
FallbackFit fit_fallback(const nlohmann::json& summary, const std::vector<GateCheck>& checks,
                         const std::vector<FallbackCandidate>& candidates);

}  // namespace ragkv
