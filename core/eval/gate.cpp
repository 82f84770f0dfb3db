// Gate checks from the eval summary, verdict lines and JUnit XML.
#include "core/eval/gate.h"

#include <fmt/format.h>

#include "core/util/error.h"

namespace ragkv {

using nlohmann::json;

namespace {

double num(const json& j, const char* key) {
  const json& v = j.at(key);
  if (v.is_null()) fail("internal: eval summary has no value for {}", key);
  return v.get<double>();
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string describe(const GateCheck& c) {
  if (c.undefined) return fmt::format("{}: not measurable (reuse does no damage here)", c.what);
  if (c.threshold == "min-quality-ratio")
    return fmt::format("{} {:.3f} {} {:.3f}", c.what, c.value, c.pass ? ">=" : "<", c.limit);
  const bool upper = c.threshold == "max-kl";
  const int prec = upper ? 4 : 3;
  return fmt::format("{} {:.{}f} ({} bound {:.{}f}) {} {:.{}f}", c.what, c.value, prec, upper ? "upper" : "lower",
                     c.bound, prec, c.pass ? (upper ? "<=" : ">=") : (upper ? ">" : "<"), c.limit, prec);
}

}  // namespace

std::vector<GateCheck> gate_checks(const json& summary, const GateThresholds& t,
                                   const std::vector<std::string>& gated_modes) {
  std::vector<GateCheck> out;
  const json& modes = summary.at("modes");
  for (const std::string& m : gated_modes) {
    if (!modes.contains(m)) fail("internal: gated mode {} is not in the eval summary", m);
    const json& j = modes.at(m);
    const json& ci = j.at("ci");
    if (t.min_agreement > 0) {
      GateCheck c{m, "min-agreement", "first-token agreement", num(j, "first_token_match"),
                  num(ci.at("first_token_match"), "lo"), t.min_agreement};
      c.pass = c.bound >= c.limit;
      out.push_back(c);
    }
    if (t.max_kl >= 0) {
      GateCheck c{m, "max-kl", "first-token KL", num(j, "kl_first_token"), num(ci.at("kl_first_token"), "hi"), t.max_kl};
      c.pass = c.bound <= c.limit;
      out.push_back(c);
    }
    if (t.min_recovery >= 0) {
      for (const auto& [key, what] : {std::pair{"kl", "recovery of first-token KL"},
                                      std::pair{"first_token", "recovery of first-token agreement"}}) {
        GateCheck c{m, std::string("min-recovery-") + (std::string(key) == "kl" ? "kl" : "first-token"), what};
        c.limit = t.min_recovery;
        const json& r = j.contains("recovery") ? j.at("recovery").value(key, json()) : json();
        if (r.is_null()) {
          if (!summary.contains("reference")) fail("--min-recovery needs the reference mode (reuse) in the run");
          c.undefined = true;
          c.pass = true;
        } else {
          c.value = num(r, "mean");
          c.bound = num(r, "lo");
          c.pass = c.bound >= c.limit;
        }
        out.push_back(c);
      }
    }
    if (t.min_quality_ratio > 0) {
      const double q = num(j, "quality_ratio");
      GateCheck c{m, "min-quality-ratio", "gold-F1 ratio to the baseline", q, q, t.min_quality_ratio};
      c.pass = q >= c.limit;
      out.push_back(c);
    }
  }
  return out;
}

std::vector<std::string> gate_verdict_lines(const std::vector<GateCheck>& checks) {
  std::vector<std::string> lines;
  for (size_t i = 0; i < checks.size();) {
    const std::string& mode = checks[i].mode;
    std::vector<std::string> failed;
    for (; i < checks.size() && checks[i].mode == mode; ++i)
      if (!checks[i].pass) failed.push_back(describe(checks[i]));
    lines.push_back(failed.empty() ? mode + ": pass" : fmt::format("{}: FAIL {}", mode, fmt::join(failed, "; ")));
  }
  return lines;
}

bool gate_passed(const std::vector<GateCheck>& checks) {
  for (const GateCheck& c : checks)
    if (!c.pass) return false;
  return true;
}

std::string gate_junit(const std::vector<GateCheck>& checks, const std::string& suite) {
  size_t failures = 0;
  for (const GateCheck& c : checks) failures += !c.pass;
  std::string x = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  x += fmt::format("<testsuites>\n<testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n",
                   xml_escape(suite), checks.size(), failures);
  for (const GateCheck& c : checks) {
    x += fmt::format("  <testcase classname=\"{}.{}\" name=\"{}\">", xml_escape(suite), xml_escape(c.mode),
                     xml_escape(c.threshold));
    if (!c.pass) x += fmt::format("<failure message=\"{}\"/>", xml_escape(describe(c)));
    else x += fmt::format("<system-out>{}</system-out>", xml_escape(describe(c)));
    x += "</testcase>\n";
  }
  x += "</testsuite>\n</testsuites>\n";
  return x;
}

json gate_json(const std::vector<GateCheck>& checks, const GateThresholds& t) {
  json j = {{"passed", gate_passed(checks)},
            {"thresholds",
             {{"min_agreement", t.min_agreement},
              {"max_kl", t.max_kl},
              {"min_recovery", t.min_recovery >= 0 ? json(t.min_recovery) : json(nullptr)},
              {"min_quality_ratio", t.min_quality_ratio > 0 ? json(t.min_quality_ratio) : json(nullptr)}}},
            {"verdicts", gate_verdict_lines(checks)}};
  json cs = json::array();
  for (const GateCheck& c : checks)
    cs.push_back({{"mode", c.mode}, {"threshold", c.threshold}, {"value", c.value}, {"bound", c.bound},
                  {"limit", c.limit}, {"pass", c.pass}, {"undefined", c.undefined}});
  j["checks"] = cs;
  return j;
}

}  // namespace ragkv
