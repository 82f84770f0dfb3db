// MODE[/METHOD][@R] strings to ModeSpecs and back.
#include "rag/mode-spec.h"

#include <fmt/format.h>

#include <cstdlib>

#include "util/error.h"

namespace ragkv {

std::string ModeSpec::name() const {
  std::string n = reuse_mode_name(mode);
  if (selection) n += std::string("/") + selection_name(*selection);
  if (ratio) n += fmt::format("@{:g}", *ratio);
  return n;
}

BlendParams ModeSpec::blend(const BlendParams& defaults) const {
  BlendParams b = defaults;
  if (selection) b.selection = *selection;
  if (ratio) b.recompute_ratio = *ratio;
  return b;
}

ModeSpec parse_mode_spec(const std::string& s) {
  const size_t at = s.find('@'), slash = s.find('/');
  const size_t mode_end = std::min(at, slash);
  ModeSpec spec;
  spec.mode = parse_reuse_mode(s.substr(0, mode_end));
  if (slash != std::string::npos) {
    if (at != std::string::npos && at < slash) fail("mode '{}': write MODE/METHOD@R, the method before the ratio", s);
    spec.selection = parse_selection(s.substr(slash + 1, at == std::string::npos ? std::string::npos : at - slash - 1));
  }
  if (at != std::string::npos) {
    const std::string r = s.substr(at + 1);
    char* end = nullptr;
    const double v = std::strtod(r.c_str(), &end);
    if (r.empty() || *end != '\0' || !(v >= 0.0 && v <= 1.0))
      fail("mode '{}': the recompute ratio after '@' must be a number in [0, 1], got '{}'", s, r);
    spec.ratio = v;
  }
  if ((spec.selection || spec.ratio) && spec.mode != ReuseMode::blend)
    fail("mode '{}': a selection method or ratio applies to blend only", s);
  return spec;
}

}  // namespace ragkv
