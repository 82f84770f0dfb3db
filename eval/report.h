// `ragkv eval` aggregation (DESIGN.md §1, §6): per mode, quality against the gold answers and
// against the baseline's answers on the same prompts, the recompute fraction and TTFT; bootstrap
// 95 % intervals of the paired differences; the JSON report and its Markdown rendering.
#pragma once
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/records.h"

namespace ragkv {

// {"baseline","queries","modes":{mode:{f1,em,f1_vs_baseline,rougeL_vs_baseline,first_token_match,
//  identical_output,kl_first_token,recompute_fraction,ttft_ms,prefill_ms,load_ms,load_hidden_ms,
//  ttft_ratio,quality_ratio,
//  cache_bad,cache_misses, "ci":{...}}}, "comparisons":[...]}. quality_ratio is the mode's gold F1
// over the baseline's (without gold answers: the mode's mean F1 against the baseline's answers).
nlohmann::json eval_summary(const std::vector<EvalItem>& items, const std::string& baseline,
                            const std::vector<std::string>& modes);
std::string eval_markdown(const nlohmann::json& summary);
// Modes whose quality_ratio is below min_ratio, as "mode: quality ratio 0.81 < 0.90".
std::vector<std::string> eval_failures(const nlohmann::json& summary, double min_ratio);

}  // namespace ragkv
