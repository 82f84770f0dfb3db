// The margin fallback's rule (`answer --fallback-margin M[/C]`, `eval --fallback-margins`): when a
// composed prompt's first step is near a tie, the reused KV's small errors decide the first token,
// so the prompt is prefilled again as `prefix` does it — its exact prefix kept, every row after it
// computed — and the answer is full's. Near a tie means a top-2 probability gap below M, or below C
// where prophet's first, unrepaired pass shows that the repair moved the first token (the repaired
// prompt's greedy token is not the unrepaired one's: the first token hangs on the repair).
#pragma once
#include <string>

namespace ragkv {

struct FallbackRule {
  double margin = 0;        // M: fall back below this gap (0: never)
  double moved_margin = 0;  // C: fall back below this gap where the repair moved the first token
  bool active() const { return margin > 0 || moved_margin > 0; }
  // gap: the composed prompt's first-step top-2 probability gap; moved: the repair moved its first
  // token (false where there was no unrepaired pass).
  bool applies(double gap, bool moved) const { return gap < margin || (moved && gap < moved_margin); }
  std::string name() const;  // "M", or "M/C" when C is given
};

// auto's rule where neither --fallback-margin nor the store (eval --fit-fallback) names one: back to
// full below a gap of 0.003, or of 0.02 where the repair moved the first token. Fitted on the shared
// sets (bench/results/README.md, "The default on the frontier: auto itself"): of the M/C grid, the
// rules that meet issue 39's targets on SQuAD 200 (both models) and MuSiQue 150 (Gemma 3) at once
// are M 0.003–0.004 with C 0.02–0.03; this one has the most compute to spare.
inline constexpr FallbackRule kDefaultAutoFallback{0.003, 0.02};

// "M" or "M/C", each in [0, 1]; Error naming the text otherwise.
FallbackRule parse_fallback_rule(const std::string& text);

}  // namespace ragkv
