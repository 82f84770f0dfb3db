// add_margin_fallbacks: each mode's answers as the margin fallback would leave them.
#include "core/eval/margin-fallback.h"

#include <fmt/format.h>

#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr const char* kTag = " fallback<";
}

std::string fallback_mode_name(const std::string& mode, const FallbackRule& rule) {
  return fmt::format("{}{}{}", mode, kTag, rule.name());
}

bool parse_fallback_mode_name(const std::string& name, std::string& mode, FallbackRule& rule) {
  const size_t at = name.rfind(kTag);
  if (at == std::string::npos) return false;
  try {
    rule = parse_fallback_rule(name.substr(at + std::string(kTag).size()));
  } catch (const Error&) {
    return false;
  }
  mode = name.substr(0, at);
  return true;
}

std::vector<std::string> add_margin_fallbacks(std::vector<EvalItem>& items, const std::string& baseline,
                                              const std::vector<std::string>& modes,
                                              const std::vector<FallbackRule>& rules) {
  std::vector<std::string> added;
  if (rules.empty()) return added;
  if (baseline != "full")
    fail("--fallback-margins: a fallback answers as full does; the baseline is {} (use --baseline full)", baseline);
  for (const std::string& m : modes) {
    if (m == baseline) continue;
    for (const FallbackRule& rule : rules) {
      const std::string name = fallback_mode_name(m, rule);
      for (EvalItem& it : items) {
        const EvalAnswer& base = it.by_mode.at(baseline);
        EvalAnswer a = it.by_mode.at(m);
        // Records made before the margin was recorded (−1) never fall back. The fallback computes
        // what follows the exact prefix (all of it in records made before that share was kept);
        // its TTFT is counted as full's, an upper bound.
        if (!a.fell_back && a.composed && a.first_margin >= 0 && rule.applies(a.first_margin, a.repair_moved)) {
          const double again = a.exact_prefix_share >= 0 ? 1.0 - a.exact_prefix_share : base.compute_fraction;
          a.answer = base.answer;
          a.output_ids = base.output_ids;
          a.kl_first_token = 0;
          a.compute_fraction += again;
          a.ttft_ms += base.ttft_ms;
          a.prefill_ms += base.prefill_ms;
          if (a.reused_recompute >= 0) a.reused_recompute += 1;  // at most every reused token-layer again
          a.fell_back = true;
          a.composed = false;
        }
        it.by_mode[name] = std::move(a);
      }
      added.push_back(name);
    }
  }
  return added;
}

}  // namespace ragkv
