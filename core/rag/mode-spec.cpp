// MODE[/METHOD][@R][~P][+freq] strings to ModeSpecs and back.
#include "core/rag/mode-spec.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr EnumNames<CraftAblation, 4> kAblationNames{{{
    {CraftAblation::no_beta, "no-beta"},
    {CraftAblation::no_focus, "no-focus"},
    {CraftAblation::random, "random"},
    {CraftAblation::prophet, "prophet"},
}}};
}  // namespace

const char* craft_ablation_name(CraftAblation a) { return kAblationNames.name(a); }

std::string ModeSpec::name() const {
  std::string n = reuse_mode_name(mode);
  if (selection) n += std::string("/") + selection_name(*selection);
  if (ablation) n += std::string("/") + craft_ablation_name(*ablation);
  if (ratio) n += fmt::format("@{:g}", *ratio);
  if (adaptive) n += fmt::format("~{:g}", *adaptive);
  if (freq_order) n += "+freq";
  return n;
}

BlendParams ModeSpec::blend(const BlendParams& defaults) const {
  BlendParams b = defaults;
  if (selection) b.selection = *selection;
  if (ratio && mode != ReuseMode::craft) b.recompute_ratio = *ratio;  // craft's is its α
  if (adaptive) b.adaptive_mass = *adaptive;
  return b;
}

CraftParams ModeSpec::craft(const CraftParams& defaults) const {
  CraftParams c = defaults;
  if (mode == ReuseMode::craft && ratio) c.alpha = *ratio;
  if (ablation == CraftAblation::no_beta) c.use_beta = false;
  if (ablation == CraftAblation::no_focus) c.focus_window = 0;
  if (ablation == CraftAblation::random) c.random_tokens = true;
  if (ablation == CraftAblation::prophet) c.question_tokens = true;
  return c;
}

namespace {
// The number after a one-character tag, in [0, max]; Error naming the spec.
double bounded_number(const std::string& spec, const std::string& text, const char* what, double max = 1.0) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(v >= 0.0 && v <= max))
    fail("mode '{}': {} must be a number in [0, {}], got '{}'", spec, what, max, text);
  return v;
}

// MODE[/METHOD][@R][~P]: split at the tags, which must come in this order.
ModeSpec parse_mode_spec_parts(const std::string& s) {
  const size_t slash = s.find('/'), at = s.find('@'), tilde = s.find('~');
  const size_t npos = std::string::npos;
  auto before = [&](size_t a, size_t b) { return a == npos || b == npos || a < b; };
  if (!before(slash, at) || !before(slash, tilde) || !before(at, tilde))
    fail("mode '{}': write MODE/METHOD@R~P, in that order", s);
  const size_t mode_end = std::min({slash, at, tilde});
  ModeSpec spec;
  spec.mode = parse_reuse_mode(s.substr(0, mode_end));
  auto part = [&](size_t from) {  // the text after the tag at `from`, up to the next tag
    const size_t next = std::min(at > from ? at : npos, tilde > from ? tilde : npos);
    return s.substr(from + 1, next == npos ? npos : next - from - 1);
  };
  if (spec.mode == ReuseMode::craft) {
    if (tilde != npos) fail("mode '{}': adaptivity '~' applies to blend only", s);
    if (slash != npos) spec.ablation = kAblationNames.parse(part(slash), "craft ablation");
    if (at != npos) spec.ratio = bounded_number(s, part(at), "craft's alpha after '@'", 10.0);
    return spec;
  }
  if (slash != npos) spec.selection = parse_selection(part(slash));
  if (at != npos) spec.ratio = bounded_number(s, part(at), "the recompute ratio after '@'");
  if (tilde != npos) spec.adaptive = bounded_number(s, part(tilde), "the adaptive score mass after '~'");
  if ((spec.selection || spec.ratio || spec.adaptive) && spec.mode != ReuseMode::blend)
    fail("mode '{}': a selection method, ratio or adaptivity applies to blend only (craft takes /ABLATION@ALPHA)", s);
  return spec;
}
}  // namespace

ModeSpec parse_mode_spec(const std::string& spec_text) {
  constexpr std::string_view kFreq = "+freq";
  const bool freq = spec_text.ends_with(kFreq);
  const std::string s = freq ? spec_text.substr(0, spec_text.size() - kFreq.size()) : spec_text;
  if (s.find(kFreq) != std::string::npos) fail("mode '{}': '+freq' comes last, after /METHOD@R~P", spec_text);
  ModeSpec spec = parse_mode_spec_parts(s);
  spec.freq_order = freq;
  return spec;
}

}  // namespace ragkv
