// add_margin_fallbacks: each mode's answers as the margin fallback would leave them.
#include "core/eval/margin-fallback.h"

#include <fmt/format.h>

#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr const char* kTag = " fallback<";
}

std::string fallback_mode_name(const std::string& mode, double margin) { return fmt::format("{}{}{:g}", mode, kTag, margin); }

bool parse_fallback_mode_name(const std::string& name, std::string& mode, double& margin) {
  const size_t at = name.rfind(kTag);
  if (at == std::string::npos) return false;
  try {
    size_t used = 0;
    const std::string m = name.substr(at + std::string(kTag).size());
    margin = std::stod(m, &used);
    if (used != m.size()) return false;
  } catch (const std::exception&) {
    return false;
  }
  mode = name.substr(0, at);
  return true;
}

std::vector<std::string> add_margin_fallbacks(std::vector<EvalItem>& items, const std::string& baseline,
                                              const std::vector<std::string>& modes,
                                              const std::vector<double>& margins) {
  std::vector<std::string> added;
  if (margins.empty()) return added;
  if (baseline != "full")
    fail("--fallback-margins: a fallback answers as full does; the baseline is {} (use --baseline full)", baseline);
  for (const std::string& m : modes) {
    if (m == baseline) continue;
    for (double margin : margins) {
      const std::string name = fallback_mode_name(m, margin);
      for (EvalItem& it : items) {
        const EvalAnswer& base = it.by_mode.at(baseline);
        EvalAnswer a = it.by_mode.at(m);
        // Records made before the margin was recorded (−1) never fall back.
        if (!a.fell_back && a.composed && a.first_margin >= 0 && a.first_margin < margin) {
          a.answer = base.answer;
          a.output_ids = base.output_ids;
          a.kl_first_token = 0;
          a.compute_fraction += base.compute_fraction;
          a.ttft_ms += base.ttft_ms;
          a.prefill_ms += base.prefill_ms;
          if (a.reused_recompute >= 0) a.reused_recompute += 1;  // every reused token-layer computed again
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
