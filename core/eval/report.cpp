// eval_summary: per-query scores → per-mode means, paired bootstrap intervals, Markdown.
#include "core/eval/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "core/eval/metrics.h"
#include "core/eval/scoring.h"
#include "core/rag/mode-spec.h"
#include "core/util/error.h"

namespace ragkv {

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

nlohmann::json interval_json(const MeanInterval& m) { return {{"mean", m.mean}, {"lo", m.lo}, {"hi", m.hi}}; }

struct ModeScores {
  std::vector<double> f1, em, f1_vs_base, rouge_vs_base, first_tok, identical, kl, compute, reused, ttft, prefill, load,
      hidden;
  bool reused_known = true;  // every record has the reused tokens' recompute share
  double cache_bad = 0, cache_misses = 0;
  double composed = 0, fallbacks = 0;
  // craft: sums over the queries
  double craft_chunks = 0, craft_variant = 0, craft_exact = 0, craft_cfo = 0, craft_fix = 0, craft_cut = 0,
         craft_cut_layers = 0;
};

nlohmann::json recovery_json(const RecoveryInterval& r) {
  if (!r.defined) return nullptr;
  return {{"mean", r.mean}, {"lo", r.lo}, {"hi", r.hi}};
}

// Per-query spread: {"p10","p50","p90"} (linear interpolation between order statistics).
nlohmann::json quantiles_json(std::vector<double> v) {
  if (v.empty()) return nullptr;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    const double x = p * double(v.size() - 1);
    const size_t i = size_t(x);
    return i + 1 < v.size() ? v[i] + (x - double(i)) * (v[i + 1] - v[i]) : v[i];
  };
  return {{"p10", q(0.1)}, {"p50", q(0.5)}, {"p90", q(0.9)}};
}

std::vector<double> one_minus(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = 1.0 - v[i];
  return out;
}

}  // namespace

nlohmann::json eval_summary(const std::vector<EvalItem>& items, const std::string& baseline,
                            const std::vector<std::string>& modes, const std::string& reference,
                            const std::map<std::string, double>& nominal) {
  std::vector<std::string> all{baseline};
  for (const auto& m : modes)
    if (m != baseline) all.push_back(m);
  const bool gold = !items.empty() && std::all_of(items.begin(), items.end(), [](const EvalItem& i) { return !i.golds.empty(); });

  std::map<std::string, ModeScores> sc;
  for (const EvalItem& it : items) {
    const EvalAnswer& base = it.by_mode.at(baseline);
    for (const auto& m : all) {
      const EvalAnswer& r = it.by_mode.at(m);
      ModeScores& s = sc[m];
      if (gold) {
        const GoldScores g = score_against_golds(r.answer, it.golds);
        s.f1.push_back(g.f1);
        s.em.push_back(g.em);
      }
      const Agreement a = score_against_baseline(r.answer, r.output_ids, base.answer, base.output_ids);
      s.f1_vs_base.push_back(a.f1);
      s.rouge_vs_base.push_back(a.rouge_l);
      s.first_tok.push_back(a.first_token ? 1.0 : 0.0);
      s.identical.push_back(a.identical ? 1.0 : 0.0);
      s.kl.push_back(r.kl_first_token);
      s.compute.push_back(r.compute_fraction);
      s.reused.push_back(r.reused_recompute);
      s.reused_known = s.reused_known && r.reused_recompute >= 0;
      s.ttft.push_back(r.ttft_ms);
      s.prefill.push_back(r.prefill_ms);
      s.load.push_back(r.load_ms);
      s.hidden.push_back(r.load_hidden_ms);
      s.composed += r.composed;
      s.fallbacks += r.fell_back;
      s.cache_bad += r.cache_bad;
      s.cache_misses += r.cache_misses;
      s.craft_chunks += r.craft_chunks;
      s.craft_variant += r.craft_variant_chunks;
      s.craft_exact += r.craft_exact_chunks;
      s.craft_cfo += r.craft_cfo_sum;
      s.craft_fix += double(r.craft_fix_tokens);
      if (r.craft_cutoff_layer >= 0) {
        ++s.craft_cut;
        s.craft_cut_layers += r.craft_cutoff_layer;
      }
    }
  }

  nlohmann::json out = {{"baseline", baseline}, {"queries", items.size()}, {"gold_answers", gold}};
  const bool with_reference = !reference.empty() && sc.count(reference);
  if (with_reference) out["reference"] = reference;
  nlohmann::json jm = nlohmann::json::object();
  const ModeScores& b = sc[baseline];
  const double base_f1 = mean(b.f1), base_ttft = mean(b.ttft);
  for (const auto& m : all) {
    const ModeScores& s = sc[m];
    const double f1 = mean(s.f1), agree = mean(s.f1_vs_base);
    nlohmann::json j = {{"f1", gold ? nlohmann::json(f1) : nlohmann::json(nullptr)},
                        {"em", gold ? nlohmann::json(mean(s.em)) : nlohmann::json(nullptr)},
                        {"f1_vs_baseline", agree},
                        {"rougeL_vs_baseline", mean(s.rouge_vs_base)},
                        {"first_token_match", mean(s.first_tok)},
                        {"identical_output", mean(s.identical)},
                        {"kl_first_token", mean(s.kl)},
                        {"compute_fraction", mean(s.compute)},
                        {"reused_recompute_fraction", s.reused_known ? nlohmann::json(mean(s.reused)) : nlohmann::json(nullptr)},
                        {"nominal_ratio", nominal.count(m) ? nlohmann::json(nominal.at(m)) : nlohmann::json(nullptr)},
                        {"compute_distribution", quantiles_json(s.compute)},
                        {"ttft_ms", mean(s.ttft)},
                        {"prefill_ms", mean(s.prefill)},
                        {"load_ms", mean(s.load)},
                        {"load_hidden_ms", mean(s.hidden)},
                        {"ttft_ratio", base_ttft > 0 ? mean(s.ttft) / base_ttft : 1.0},
                        {"quality_ratio", gold ? (base_f1 > 0 ? f1 / base_f1 : 1.0) : agree},
                        {"composed_share", s.f1_vs_base.empty() ? 0.0 : s.composed / double(s.f1_vs_base.size())},
                        {"fallbacks", s.fallbacks},
                        {"cache_bad", s.cache_bad},
                        {"cache_misses", s.cache_misses}};
    if (gold) j["ci"]["f1_minus_baseline"] = interval_json(bootstrap_mean_difference(s.f1, b.f1));
    j["ci"]["f1_vs_baseline"] = interval_json(bootstrap_mean(s.f1_vs_base));
    j["ci"]["first_token_match"] = interval_json(bootstrap_mean(s.first_tok));
    j["ci"]["kl_first_token"] = interval_json(bootstrap_mean(s.kl));
    if (with_reference) {
      // FusionRAG's recovery, per damage against the baseline's output (ANCHORS.md).
      const ModeScores& ref = sc[reference];
      j["recovery"] = {{"kl", recovery_json(bootstrap_recovery(ref.kl, s.kl))},
                       {"first_token", recovery_json(bootstrap_recovery(one_minus(ref.first_tok), one_minus(s.first_tok)))},
                       {"answer_f1", recovery_json(bootstrap_recovery(one_minus(ref.f1_vs_base), one_minus(s.f1_vs_base)))}};
    }
    if (s.craft_chunks > 0) {
      const double nq = double(items.size());
      j["craft"] = {{"variant_share", s.craft_variant / s.craft_chunks},
                    {"exact_share", s.craft_exact / s.craft_chunks},
                    {"mean_cfo", s.craft_cfo / s.craft_chunks},
                    {"fix_tokens_per_query", s.craft_fix / nq},
                    {"cutoff_share", s.craft_cut / nq},
                    {"mean_cutoff_layer", s.craft_cut > 0 ? nlohmann::json(s.craft_cut_layers / s.craft_cut) : nlohmann::json(nullptr)}};
    }
    jm[m] = j;
  }
  out["modes"] = jm;
  out["mode_order"] = all;  // baseline first, then --modes as given (JSON objects sort their keys)

  // Paired differences of agreement with the baseline and of gold F1 (e.g. blend − reuse: the
  // damage recompute repairs): every pair of non-baseline modes when there are a few; in a sweep,
  // each mode against the reference, the pairs at the same nominal ratio (methods compared at
  // equal compute), craft's ablations against craft at the same α, and craft against blend.
  const bool all_pairs = all.size() <= 5;
  auto spec_of = [](const std::string& m) -> std::optional<ModeSpec> {
    try {
      return parse_mode_spec(m);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  auto compared = [&](const std::string& a, const std::string& b) {
    if (all_pairs || a == reference || b == reference) return true;
    if (nominal.count(a) && nominal.count(b) && nominal.at(a) == nominal.at(b)) return true;
    const auto sa = spec_of(a), sb = spec_of(b);
    if (!sa || !sb) return false;
    const bool craft_a = sa->mode == ReuseMode::craft, craft_b = sb->mode == ReuseMode::craft;
    if (craft_a && craft_b) return sa->ratio == sb->ratio;  // ablations at one α
    return (craft_a && sb->mode == ReuseMode::blend) || (craft_b && sa->mode == ReuseMode::blend);
  };
  nlohmann::json cmp = nlohmann::json::array();
  for (size_t i = 1; i < all.size(); ++i)
    for (size_t k = i + 1; k < all.size(); ++k) {
      if (!compared(all[i], all[k])) continue;
      const ModeScores &a = sc[all[i]], &c = sc[all[k]];
      nlohmann::json j = {{"a", all[i]}, {"b", all[k]},
                          {"f1_vs_baseline_diff", interval_json(bootstrap_mean_difference(a.f1_vs_base, c.f1_vs_base))}};
      j["first_token_match_diff"] = interval_json(bootstrap_mean_difference(a.first_tok, c.first_tok));
      j["kl_first_token_diff"] = interval_json(bootstrap_mean_difference(a.kl, c.kl));
      if (gold) j["f1_diff"] = interval_json(bootstrap_mean_difference(a.f1, c.f1));
      cmp.push_back(j);
    }
  out["comparisons"] = cmp;
  return out;
}

std::string eval_markdown(const nlohmann::json& s, const std::string& picture) {
  const bool gold = s.value("gold_answers", false);
  const bool with_ref = s.contains("reference");
  std::string md = "# ragkv eval\n\n";
  if (s.contains("gate")) {
    const auto& g = s.at("gate");
    md += fmt::format("**Gate: {}**\n\n", g.at("passed").get<bool>() ? "pass" : "FAIL");
    for (const auto& line : g.at("verdicts")) md += "- " + line.get<std::string>() + "\n";
    md += "\n";
  }
  md += fmt::format("{} queries; baseline `{}`{}.\n\n", s.at("queries").get<size_t>(), s.at("baseline").get<std::string>(),
                    with_ref ? fmt::format("; recovery relative to `{}`", s.at("reference").get<std::string>()) : "");
  auto num = [](const nlohmann::json& v, int prec) { return v.is_null() ? std::string("–") : fmt::format("{:.{}f}", v.get<double>(), prec); };
  auto rec = [&](const nlohmann::json& j, const char* key) {
    if (!j.contains("recovery") || j["recovery"][key].is_null()) return std::string("–");
    const auto& r = j["recovery"][key];
    return fmt::format("{:.2f} [{:.2f}, {:.2f}]", r["mean"].get<double>(), r["lo"].get<double>(), r["hi"].get<double>());
  };
  md += "| mode | F1 | EM | F1 vs baseline | first token | identical | KL first token | recovery KL | recovery first token "
        "| recovery answer F1 | compute | TTFT ms | TTFT ratio | quality ratio | recomputed of reused |\n";
  md += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> order = s.value("mode_order", std::vector<std::string>{});
  if (order.empty())
    for (const auto& [m, j] : s.at("modes").items()) order.push_back(m);
  for (const auto& m : order) {
    const nlohmann::json& j = s.at("modes").at(m);
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", m, num(j["f1"], 3),
                      num(j["em"], 3), num(j["f1_vs_baseline"], 3), num(j["first_token_match"], 3),
                      num(j["identical_output"], 3), num(j["kl_first_token"], 4), rec(j, "kl"), rec(j, "first_token"),
                      rec(j, "answer_f1"), num(j["compute_fraction"], 3), num(j["ttft_ms"], 1), num(j["ttft_ratio"], 3),
                      num(j["quality_ratio"], 3), num(j.value("reused_recompute_fraction", nlohmann::json()), 3));
  }
  md += "\nCompute: the token-layers computed by every pass of the prefill (a question pass, check layers, fixes, "
        "the recompute, a fallback's full prefill) over full's. Recomputed of reused: the share of the reused tokens' "
        "token-layers recomputed (layer 0 and the check layers included), the selection's own ratio.\n";
  if (s.contains("baseline_cache"))
    md += fmt::format("\nWith `--baseline-cache` ({}; {} taken in this run), `{}`'s answers and TTFTs may come from an "
                      "earlier run of this engine (same binary, device, kernels and threads): TTFT ratios then pair timings made "
                      "at different times (load), while compute does not depend on them.\n",
                      s["baseline_cache"].value("file", std::string()), s["baseline_cache"].value("taken", size_t(0)),
                      s.at("baseline").get<std::string>());
  std::string spread;
  for (const auto& m : order) {
    const nlohmann::json& d = s.at("modes").at(m).value("compute_distribution", nlohmann::json());
    if (m.find('~') == std::string::npos || d.is_null()) continue;
    spread += fmt::format("- `{}`: p10 {:.3f}, median {:.3f}, p90 {:.3f}\n", m, d["p10"].get<double>(),
                          d["p50"].get<double>(), d["p90"].get<double>());
  }
  if (!spread.empty()) md += "\nPer-query compute of the adaptive modes:\n\n" + spread;
  std::string craft;
  for (const auto& m : order) {
    const nlohmann::json& j = s.at("modes").at(m);
    if (!j.contains("craft")) continue;
    const nlohmann::json& c = j["craft"];
    craft += fmt::format("| {} | {:.3f} | {:.3f} | {:.3f} | {:.1f} | {:.2f} | {} |\n", m, c["variant_share"].get<double>(),
                         c["exact_share"].get<double>(), c["mean_cfo"].get<double>(),
                         c["fix_tokens_per_query"].get<double>(), c["cutoff_share"].get<double>(),
                         num(c["mean_cutoff_layer"], 1));
  }
  if (!craft.empty())
    md += "\nCache-Craft's choices (per reused chunk: share from a non-canonical variant, share reused as an exact "
          "chain, mean CFO; per query: tokens fixed, share with an early cut-off, mean cut-off layer L*):\n\n"
          "| mode | variant | exact | CFO | fix tokens | cut-off | L* |\n|---|---|---|---|---|---|---|\n" +
          craft;
  if (!picture.empty())
    md += fmt::format("\n![Recovery and first-token agreement against compute and TTFT]({})\n", picture);
  md += "\nPaired differences, mean [95 % bootstrap interval]:\n\n";
  for (const auto& m : order) {
    const nlohmann::json& j = s.at("modes").at(m);
    if (m == s.at("baseline").get<std::string>() || !gold || !j["ci"].contains("f1_minus_baseline")) continue;
    const auto& c = j["ci"]["f1_minus_baseline"];
    md += fmt::format("- `{}` gold F1 − baseline: {:+.3f} [{:+.3f}, {:+.3f}]\n", m, c["mean"].get<double>(),
                      c["lo"].get<double>(), c["hi"].get<double>());
  }
  auto diff = [&](const nlohmann::json& c, const char* key, const char* what, int prec) {
    if (!c.contains(key)) return;
    const auto& d = c[key];
    md += fmt::format("- {}, `{}` − `{}`: {:+.{}f} [{:+.{}f}, {:+.{}f}]\n", what, c["a"].get<std::string>(),
                      c["b"].get<std::string>(), d["mean"].get<double>(), prec, d["lo"].get<double>(), prec,
                      d["hi"].get<double>(), prec);
  };
  for (const auto& c : s.at("comparisons")) {
    diff(c, "f1_vs_baseline_diff", "agreement with baseline (F1 vs its answers)", 3);
    diff(c, "first_token_match_diff", "first-token agreement", 3);
    diff(c, "kl_first_token_diff", "KL of the first token", 4);
    diff(c, "f1_diff", "gold F1", 3);
  }
  return md;
}

}  // namespace ragkv
