// eval_summary: per-query scores → per-mode means, paired bootstrap intervals, Markdown.
#include "eval/report.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"
#include "eval/metrics.h"
#include "eval/scoring.h"

namespace ragkv {

namespace {

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / double(v.size());
}

nlohmann::json interval_json(const MeanInterval& m) { return {{"mean", m.mean}, {"lo", m.lo}, {"hi", m.hi}}; }

struct ModeScores {
  std::vector<double> f1, em, f1_vs_base, rouge_vs_base, first_tok, identical, kl, recompute, ttft, prefill, load, hidden;
  double cache_bad = 0, cache_misses = 0;
};

}  // namespace

nlohmann::json eval_summary(const std::vector<EvalItem>& items, const std::string& baseline,
                            const std::vector<std::string>& modes) {
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
      s.recompute.push_back(r.recompute_fraction);
      s.ttft.push_back(r.ttft_ms);
      s.prefill.push_back(r.prefill_ms);
      s.load.push_back(r.load_ms);
      s.hidden.push_back(r.load_hidden_ms);
      s.cache_bad += r.cache_bad;
      s.cache_misses += r.cache_misses;
    }
  }

  nlohmann::json out = {{"baseline", baseline}, {"queries", items.size()}, {"gold_answers", gold}};
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
                        {"recompute_fraction", mean(s.recompute)},
                        {"ttft_ms", mean(s.ttft)},
                        {"prefill_ms", mean(s.prefill)},
                        {"load_ms", mean(s.load)},
                        {"load_hidden_ms", mean(s.hidden)},
                        {"ttft_ratio", base_ttft > 0 ? mean(s.ttft) / base_ttft : 1.0},
                        {"quality_ratio", gold ? (base_f1 > 0 ? f1 / base_f1 : 1.0) : agree},
                        {"cache_bad", s.cache_bad},
                        {"cache_misses", s.cache_misses}};
    if (gold) j["ci"]["f1_minus_baseline"] = interval_json(bootstrap_mean_difference(s.f1, b.f1));
    j["ci"]["f1_vs_baseline"] = interval_json(bootstrap_mean(s.f1_vs_base));
    jm[m] = j;
  }
  out["modes"] = jm;
  out["mode_order"] = all;  // baseline first, then --modes as given (JSON objects sort their keys)

  // Every pair of non-baseline modes: paired differences of agreement with the baseline and of
  // gold F1 (e.g. blend − reuse: the damage recompute repairs).
  nlohmann::json cmp = nlohmann::json::array();
  for (size_t i = 1; i < all.size(); ++i)
    for (size_t k = i + 1; k < all.size(); ++k) {
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

std::string eval_markdown(const nlohmann::json& s) {
  const bool gold = s.value("gold_answers", false);
  std::string md = fmt::format("# ragkv eval\n\n{} queries; baseline `{}`.\n\n", s.at("queries").get<size_t>(),
                               s.at("baseline").get<std::string>());
  md += "| mode | F1 | EM | F1 vs baseline | ROUGE-L vs baseline | first token | identical | KL first token | recompute | TTFT ms | TTFT ratio | quality ratio |\n";
  md += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  auto num = [](const nlohmann::json& v, int prec) { return v.is_null() ? std::string("–") : fmt::format("{:.{}f}", v.get<double>(), prec); };
  std::vector<std::string> order = s.value("mode_order", std::vector<std::string>{});
  if (order.empty())
    for (const auto& [m, j] : s.at("modes").items()) order.push_back(m);
  for (const auto& m : order) {
    const nlohmann::json& j = s.at("modes").at(m);
    md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", m, num(j["f1"], 3), num(j["em"], 3),
                      num(j["f1_vs_baseline"], 3), num(j["rougeL_vs_baseline"], 3), num(j["first_token_match"], 3),
                      num(j["identical_output"], 3), num(j["kl_first_token"], 4), num(j["recompute_fraction"], 3),
                      num(j["ttft_ms"], 1), num(j["ttft_ratio"], 3), num(j["quality_ratio"], 3));
  }
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

std::vector<std::string> eval_failures(const nlohmann::json& s, double min_ratio) {
  std::vector<std::string> f;
  for (const auto& [m, j] : s.at("modes").items()) {
    const double q = j.at("quality_ratio").get<double>();
    if (q < min_ratio) f.push_back(fmt::format("{}: quality ratio {:.3f} < {:.3f}", m, q, min_ratio));
  }
  return f;
}

}  // namespace ragkv
