// The quality gate of `ragkv eval` (DESIGN.md §6): a mode passes when its agreement with the
// baseline holds at the pessimistic end of the paired bootstrap interval — first-token agreement
// (lower bound) at least --min-agreement, first-token KL (upper bound) at most --max-kl, and,
// when asked, recovery of reuse's damage (lower bound) at least --min-recovery. The gold-F1
// ratio to the baseline is information, and a gate only when --min-quality-ratio is set.
// One check per mode and threshold: a verdict line per mode for people, JUnit XML for CI.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ragkv {

struct GateThresholds {
  double min_agreement = 0.9;   // first-token agreement with the baseline, lower 95 % bound
  double max_kl = 0.1;          // mean first-token KL(baseline ‖ mode) in nats, upper 95 % bound
  double min_recovery = -1;     // recovery of first-token KL and agreement, lower bound; < 0: off
  double min_quality_ratio = 0; // gold F1 over the baseline's (point value); 0: off
};

struct GateCheck {
  std::string mode;
  std::string threshold;  // "min-agreement", "max-kl", "min-recovery-kl", "min-recovery-first-token", "min-quality-ratio"
  std::string what;       // "first-token agreement", …
  double value = 0;       // the mean
  double bound = 0;       // the end of the interval the gate reads (the mean for quality ratio)
  double limit = 0;
  bool pass = false;
  bool undefined = false; // recovery without any damage to recover: not gated, passes
};

// Checks of every gated mode (in order) against the thresholds that are on, from eval_summary's
// JSON (core/eval/report.h).
std::vector<GateCheck> gate_checks(const nlohmann::json& summary, const GateThresholds& t,
                                   const std::vector<std::string>& gated_modes);
// One line per mode: "blend: pass" or "reuse: FAIL first-token agreement 0.780 (lower bound 0.722)
// < 0.900; first-token KL 0.2097 (upper bound 0.2401) > 0.1000".
std::vector<std::string> gate_verdict_lines(const std::vector<GateCheck>& checks);
bool gate_passed(const std::vector<GateCheck>& checks);
// JUnit XML: one <testsuite> with a <testcase> per check, <failure> where it failed.
std::string gate_junit(const std::vector<GateCheck>& checks, const std::string& suite);
// The thresholds in the summary's "gate" object (for the report).
nlohmann::json gate_json(const std::vector<GateCheck>& checks, const GateThresholds& t);

}  // namespace ragkv
