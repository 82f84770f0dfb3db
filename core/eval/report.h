// `ragkv eval` aggregation (DESIGN.md §1, §6): per mode, quality against the gold answers and
// against the baseline's answers on the same prompts, the compute (every pass) and TTFT; bootstrap
// 95 % intervals of the paired differences; the JSON report and its Markdown rendering.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/records.h"

namespace ragkv {

// {"baseline","reference","queries","gold_answers","mode_order","modes":{mode:{f1,em,
//  f1_vs_baseline,rougeL_vs_baseline,first_token_match,identical_output,kl_first_token,
//  compute_fraction,reused_recompute_fraction,compute_distribution,nominal_ratio,ttft_ms,prefill_ms,load_ms,
//  load_hidden_ms,ttft_ratio,quality_ratio,cache_bad,cache_misses,
//  "recovery":{"kl","first_token","answer_f1"},"ci":{...}}},"comparisons":[...]}.
// quality_ratio is the mode's gold F1 over the baseline's (without gold answers: the mode's mean
// F1 against the baseline's answers). recovery (core/eval/metrics.h) is each damage — first-token KL,
// 1 − first-token agreement, 1 − answer F1 against the baseline — repaired relative to
// `reference` (reuse); absent without a reference. nominal[m] is mode m's --recompute-ratio
// where it has one.
nlohmann::json eval_summary(const std::vector<EvalItem>& items, const std::string& baseline,
                            const std::vector<std::string>& modes, const std::string& reference = "",
                            const std::map<std::string, double>& nominal = {});
// The Markdown report: the gate's verdict first (summary["gate"], when set), then the table, the
// trade-off picture (`picture`, a file name beside the report, when not empty), the intervals.
std::string eval_markdown(const nlohmann::json& summary, const std::string& picture = "");

}  // namespace ragkv
