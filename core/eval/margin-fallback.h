// The margin fallback derived from eval records: how each mode would do under
// `answer --fallback-margin M` without running it again. A query whose composed prompt had a
// first-step top-2 probability gap below M falls back to full: its answer is the baseline's (full
// recomputes exactly), and it costs the mode's prefill plus the baseline's (compute and TTFT).
#pragma once
#include <string>
#include <vector>

#include "core/eval/records.h"

namespace ragkv {

// "MODE fallback<M": the derived mode's name.
std::string fallback_mode_name(const std::string& mode, double margin);
// Splits a derived name into the mode and M; false for any other name.
bool parse_fallback_mode_name(const std::string& name, std::string& mode, double& margin);

// Adds to every item, for each of `modes` (not the baseline) and each margin, the derived answer
// under its fallback name; returns the names added, mode by mode in margin order. The baseline must
// be full (a fallback's answer is full's): Error otherwise.
std::vector<std::string> add_margin_fallbacks(std::vector<EvalItem>& items, const std::string& baseline,
                                              const std::vector<std::string>& modes,
                                              const std::vector<double>& margins);

}  // namespace ragkv
