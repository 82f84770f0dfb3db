// The margin fallback derived from eval records: how each mode would do under
// `answer --fallback-margin M[/C]` (core/rag/fallback-rule.h) without running it again. A query
// whose composed prompt the rule sends back is prefilled again after its exact prefix: its answer
// is the baseline's (full's, which that prefill reproduces), and it costs the mode's prefill plus
// the rows after the exact prefix (compute) and plus full's TTFT (an upper bound).
#pragma once
#include <string>
#include <vector>

#include "core/eval/records.h"
#include "core/rag/fallback-rule.h"

namespace ragkv {

// "MODE fallback<M" or "MODE fallback<M/C": the derived mode's name.
std::string fallback_mode_name(const std::string& mode, const FallbackRule& rule);
// Splits a derived name into the mode and the rule; false for any other name.
bool parse_fallback_mode_name(const std::string& name, std::string& mode, FallbackRule& rule);

// Adds to every item, for each of `modes` (not the baseline) and each rule, the derived answer
// under its fallback name; returns the names added, mode by mode in the rules' order. The baseline must
// be full (a fallback's answer is full's): Error otherwise.
std::vector<std::string> add_margin_fallbacks(std::vector<EvalItem>& items, const std::string& baseline,
                                              const std::vector<std::string>& modes,
                                              const std::vector<FallbackRule>& rules);

}  // namespace ragkv
