// One variant of a reuse mode, as `answer --mode` and `eval --modes` name it:
//   MODE[/METHOD][@R][~P]     e.g. blend, blend/v, blend@0.2, blend/prophet@0.2~0.8
// METHOD (a Selection, core/rag/plan.h), R (the recompute ratio) and P (per-query adaptivity: the
// score mass to cover, BlendParams::adaptive_mass) apply to blend only; parts left out are the
// model architecture's default method, --recompute-ratio and no adaptivity. Eval reports each
// variant under its name, so methods and ratios can be compared side by side on the same prompts.
//   craft[/ABLATION][@A]      e.g. craft, craft@0.3, craft/no-focus@0.3
// A is Cache-Craft's α (Eq. 12, in [0, 10]; default: the store's fitted α, else kDefaultAlpha);
// ABLATION is one of Cache-Craft §5's: no-beta (β′ = 0), no-focus (no early termination), random
// (random tokens, not CCI-ranked); or prophet, a combination: craft's variants and CFO budget, the tokens chosen by blend's prophet.
//   any of these + "+freq"    e.g. full+freq, blend@0.2+freq
// the prompt's chunks in CRAFT's frequency order (most accessed in the CA-Table's window first,
// craft-chunk-reordering.txt §4) instead of retrieval order: `eval` measures what the order costs
// against a baseline in retrieval order; `answer` orders each prompt so too.
#pragma once
#include <optional>
#include <string>

#include "core/rag/plan.h"
#include "core/rag/reuse-mode.h"
#include "core/rag/variant-choice.h"

namespace ragkv {

enum class CraftAblation : uint8_t { no_beta, no_focus, random, prophet };
const char* craft_ablation_name(CraftAblation a);

struct ModeSpec {
  ModeSpec() = default;
  explicit ModeSpec(ReuseMode m, std::optional<Selection> s = std::nullopt, std::optional<double> r = std::nullopt,
                    std::optional<double> a = std::nullopt)
      : mode(m), selection(s), ratio(r), adaptive(a) {}
  ReuseMode mode = ReuseMode::full;
  std::optional<Selection> selection;
  std::optional<double> ratio;
  std::optional<double> adaptive;
  std::optional<CraftAblation> ablation;  // craft only; ratio holds craft's α
  bool freq_order = false;                // "+freq": CRAFT's frequency chunk order
  std::string name() const;  // canonical: the mode, then "/method", "@r", "~p" and "+freq" where set
  // The blend parameters of this variant: defaults with the spec's method and ratio.
  BlendParams blend(const BlendParams& defaults) const;
  // The craft parameters of this variant: defaults with the spec's α and ablation.
  CraftParams craft(const CraftParams& defaults) const;
  bool operator==(const ModeSpec&) const = default;
};

// Error naming the bad part ("unknown selection method 'x' (expected …)", "a method or ratio
// applies to blend only", a ratio outside [0, 1]).
ModeSpec parse_mode_spec(const std::string& s);

}  // namespace ragkv
