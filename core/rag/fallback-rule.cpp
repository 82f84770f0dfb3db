// parse_fallback_rule and the rule's name.
#include "core/rag/fallback-rule.h"

#include <fmt/format.h>

#include "core/util/error.h"

namespace ragkv {

std::string FallbackRule::name() const {
  return moved_margin > 0 ? fmt::format("{:g}/{:g}", margin, moved_margin) : fmt::format("{:g}", margin);
}

namespace {
double parse_gap(const std::string& part, const std::string& text) {
  size_t used = 0;
  double v = -1;
  try {
    v = std::stod(part, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (part.empty() || used != part.size() || !(v >= 0 && v <= 1))
    fail("fallback margin '{}': expected M or M/C, each a probability gap in [0, 1] (e.g. 0.02 or 0.005/0.05)", text);
  return v;
}
}  // namespace

FallbackRule parse_fallback_rule(const std::string& text) {
  FallbackRule r;
  const size_t slash = text.find('/');
  r.margin = parse_gap(text.substr(0, slash), text);
  if (slash != std::string::npos) r.moved_margin = parse_gap(text.substr(slash + 1), text);
  return r;
}

}  // namespace ragkv
