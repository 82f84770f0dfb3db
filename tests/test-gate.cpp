// The eval gate on recorded answers (no model): recovery arithmetic and its bootstrap, the
// gate's decisions (reuse fails, prefix passes, thresholds exactly at the boundary), the verdict
// lines, JUnit XML, and the trade-off data a sweep writes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/eval/gate.h"
#include "core/eval/margin-fallback.h"
#include "core/eval/metrics.h"
#include "core/eval/records.h"
#include "core/eval/report.h"
#include "core/eval/tradeoff-plot.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "core/model/generate.h"
#include "core/util/error.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace {

using namespace ragkv;

// An answer whose first token is `first` and whose first-token KL to the baseline is kl; `compute`
// is both its compute fraction and its reused tokens' share (−1: nothing reused, full's compute).
EvalAnswer answer(int32_t first, double kl, const std::string& text = "x", double compute = -1) {
  EvalAnswer a;
  a.answer = text;
  a.output_ids = {first, 7};
  a.kl_first_token = kl;
  a.ttft_ms = 10;
  a.reused_recompute = compute;
  a.compute_fraction = compute >= 0 ? compute : 1.0;
  return a;
}

// n queries: full (the baseline), prefix (identical), reuse (first token wrong on every other
// query, KL 0.4), blend (one wrong first token in ten, KL 0.05).
std::vector<EvalItem> recorded(int n) {
  std::vector<EvalItem> items;
  for (int i = 0; i < n; ++i) {
    EvalItem it;
    it.id = std::to_string(i);
    it.by_mode["full"] = answer(1, 0.0);
    it.by_mode["prefix"] = answer(1, 0.0, "x", 0.0);
    it.by_mode["reuse"] = answer(i % 2 ? 2 : 1, 0.4, i % 2 ? "y" : "x", 0.0);
    it.by_mode["blend"] = answer(i % 10 == 3 ? 2 : 1, 0.05, i % 10 == 3 ? "y" : "x", 0.2);
    items.push_back(it);
  }
  return items;
}

}  // namespace

TEST_CASE("gate: recovery is 1 - mean(damage) / mean(reference damage), with a paired bootstrap") {
  const std::vector<double> ref = {0.4, 0.2, 0.6, 0.0}, mode = {0.1, 0.1, 0.0, 0.0};
  const RecoveryInterval r = bootstrap_recovery(ref, mode);
  REQUIRE(r.defined);
  CHECK(r.mean == doctest::Approx(1.0 - 0.2 / 1.2));
  CHECK(r.lo <= r.mean);
  CHECK(r.hi >= r.mean);
  CHECK(r.hi <= 1.0);
  // The mode doing the reference's damage recovers 0; no damage at all recovers 1; twice the
  // damage recovers -1.
  CHECK(bootstrap_recovery(ref, ref).mean == doctest::Approx(0.0));
  CHECK(bootstrap_recovery(ref, std::vector<double>(4, 0.0)).mean == doctest::Approx(1.0));
  CHECK(bootstrap_recovery(ref, std::vector<double>{0.8, 0.4, 1.2, 0.0}).mean == doctest::Approx(-1.0));
  // Nothing to recover: undefined, not a division by zero.
  CHECK_FALSE(bootstrap_recovery(std::vector<double>(3, 0.0), std::vector<double>(3, 0.1)).defined);
  CHECK_THROWS_AS(bootstrap_recovery(ref, std::vector<double>{0.1}), Error);
}

TEST_CASE("gate: recovery resamples the reference and the mode together, query by query") {
  // Damage that varies widely over the queries, and a mode that repairs exactly half of each
  // query's: paired, every resample recovers 0.5, so the interval is [0.5, 0.5]. A bootstrap that
  // drew the two sides' queries independently would spread it (checked below with the two sides
  // shuffled apart, which keeps both means and so the point estimate).
  std::vector<double> ref, mode;
  for (int i = 0; i < 60; ++i) {
    ref.push_back(i % 3 == 0 ? 0.05 : i % 3 == 1 ? 0.5 : 2.0);
    mode.push_back(ref.back() / 2);
  }
  const RecoveryInterval paired = bootstrap_recovery(ref, mode);
  REQUIRE(paired.defined);
  CHECK(paired.mean == doctest::Approx(0.5));
  CHECK(paired.lo == doctest::Approx(0.5));
  CHECK(paired.hi == doctest::Approx(0.5));
  std::vector<double> apart = mode;
  std::rotate(apart.begin(), apart.begin() + 1, apart.end());  // query i's repair beside query i+1's damage
  const RecoveryInterval unpaired = bootstrap_recovery(ref, apart);
  CHECK(unpaired.mean == doctest::Approx(0.5));
  CHECK(unpaired.hi - unpaired.lo > 0.1);
}

TEST_CASE("gate: on a recorded eval, reuse fails, prefix and a good blend pass, one line per mode") {
  const std::vector<EvalItem> items = recorded(40);
  const nlohmann::json s = eval_summary(items, "full", {"prefix", "reuse", "blend"}, "reuse", {{"blend", 0.15}});
  CHECK(s["reference"] == "reuse");
  const auto& blend = s["modes"]["blend"];
  CHECK(blend["first_token_match"] == doctest::Approx(0.9));
  CHECK(blend["recovery"]["kl"]["mean"] == doctest::Approx(1.0 - 0.05 / 0.4));
  CHECK(blend["recovery"]["first_token"]["mean"] == doctest::Approx(1.0 - 0.1 / 0.5));
  CHECK(blend["reused_recompute_fraction"] == doctest::Approx(0.2));
  CHECK(blend["nominal_ratio"] == 0.15);
  CHECK(s["modes"]["full"]["reused_recompute_fraction"].is_null());

  GateThresholds t;  // defaults: agreement ≥ 0.9 (lower bound), KL ≤ 0.1 (upper bound)
  t.min_agreement = 0.7;
  const auto checks = gate_checks(s, t, {"prefix", "reuse", "blend"});
  REQUIRE(checks.size() == 6);
  CHECK_FALSE(gate_passed(checks));
  const auto lines = gate_verdict_lines(checks);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "prefix: pass");
  CHECK(lines[1].starts_with("reuse: FAIL first-token agreement 0.500 (lower bound 0."));
  CHECK(lines[1].find("; first-token KL 0.4000 (upper bound 0.4000) > 0.1000") != std::string::npos);
  CHECK(lines[2] == "blend: pass");  // 0.9 with lower bound ≥ 0.7, KL 0.05
  CHECK(gate_passed(gate_checks(s, t, {"prefix", "blend"})));

  // Recovery as a gate: reuse recovers nothing by definition, the blend above 0.8 of both damages.
  GateThresholds r;
  r.min_agreement = 0;
  r.max_kl = -1;
  r.min_recovery = 0.5;
  const auto rc = gate_checks(s, r, {"reuse", "blend"});
  REQUIRE(rc.size() == 4);
  CHECK_FALSE(rc[0].pass);
  CHECK(rc[2].pass);
  CHECK(rc[3].pass);
}

TEST_CASE("gate: the recorded default eval of 30 SQuAD questions fails reuse and passes prefix") {
  // testdata/gate-squad30-smollm2.answers.jsonl: the --answers records of
  //   ragkv eval squad30.jsonl --modes prefix,reuse,blend --top-k 5 --max-tokens 16 (SmolLM2,
  //   default blend prophet@0.2), bench/results/2026-11-23-fidelity-selection/2026-11-23-gate-squad30-smollm2.md.
  EvalSettings settings;
  settings.modes = {"full", "prefix", "reuse", "blend"};
  std::vector<EvalItem> items;
  for_each_jsonl_line(read_file(test::testdata("gate-squad30-smollm2.answers.jsonl")),
                      [&](size_t, std::string_view line) { items.push_back(eval_item_of(parse_json_line(line), settings)); });
  REQUIRE(items.size() == 30);
  const nlohmann::json s = eval_summary(items, "full", {"prefix", "reuse", "blend"}, "reuse");
  const auto lines = gate_verdict_lines(gate_checks(s, GateThresholds{}, {"prefix", "reuse", "blend"}));
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "prefix: pass");
  CHECK(lines[1] == "reuse: FAIL first-token agreement 0.733 (lower bound 0.567) < 0.900; first-token KL 0.2249 "
                    "(upper bound 0.2737) > 0.1000");
  // 28 of 30 first tokens agree: the mean passes 0.9, the interval's lower end does not.
  CHECK(lines[2] == "blend: FAIL first-token agreement 0.933 (lower bound 0.833) < 0.900");
  CHECK(s["modes"]["blend"]["recovery"]["kl"]["mean"].get<double>() > 0.8);
}

TEST_CASE("gate: the agreement bound it reads is the binomial one worked by hand") {
  // 40 queries, the first token right on every other one: a bootstrap mean is k/40 with
  // k ~ Binomial(40, 1/2), whose 2.5th and 97.5th percentiles are k = 14 and 26 (P(k <= 13) =
  // 0.019, P(k <= 14) = 0.040; symmetric). The percentile interval of 2000 resamples lies within
  // a step of them; the gate reads its lower end.
  std::vector<EvalItem> items = recorded(40);
  for (size_t i = 0; i < items.size(); ++i) items[i].by_mode["blend"] = answer(i % 2 ? 2 : 1, 0.0);
  const nlohmann::json s = eval_summary(items, "full", {"blend"});
  GateThresholds t;
  t.max_kl = -1;
  t.min_agreement = 0.30;
  const std::vector<GateCheck> checks = gate_checks(s, t, {"blend"});
  REQUIRE(checks.size() == 1);
  CHECK(checks[0].value == doctest::Approx(0.5));
  CHECK(checks[0].bound >= 13.0 / 40);
  CHECK(checks[0].bound <= 15.0 / 40);
  CHECK(gate_passed(checks));  // 0.30 is below every bound the binomial allows
  t.min_agreement = 0.40;
  CHECK_FALSE(gate_passed(gate_checks(s, t, {"blend"})));  // and 0.40 above
}

TEST_CASE("gate: a threshold exactly at the interval's end passes, just past it fails") {
  std::vector<EvalItem> items = recorded(10);
  // Always the first token, KL exactly 0.125 (a binary fraction: every mean of the bootstrap is
  // exactly 0.125 too).
  for (auto& it : items) it.by_mode["blend"] = answer(1, 0.125);
  const nlohmann::json s = eval_summary(items, "full", {"blend"});
  GateThresholds t;
  t.min_agreement = 1.0;
  t.max_kl = 0.125;
  CHECK(gate_passed(gate_checks(s, t, {"blend"})));
  t.max_kl = std::nextafter(0.125, 0.0);
  CHECK_FALSE(gate_passed(gate_checks(s, t, {"blend"})));
  t.max_kl = 0.125;
  t.min_agreement = std::nextafter(1.0, 2.0);
  CHECK_FALSE(gate_passed(gate_checks(s, t, {"blend"})));
  // Thresholds switched off: no checks.
  GateThresholds off;
  off.min_agreement = 0;
  off.max_kl = -1;
  CHECK(gate_checks(s, off, {"blend"}).empty());
  // --min-recovery needs the reference in the run.
  off.min_recovery = 0.5;
  CHECK_THROWS_AS(gate_checks(s, off, {"blend"}), Error);
}

TEST_CASE("gate: JUnit XML has a test case per mode and threshold, failures with their reason") {
  const nlohmann::json s = eval_summary(recorded(20), "full", {"prefix", "reuse"}, "reuse");
  const auto checks = gate_checks(s, GateThresholds{}, {"prefix", "reuse"});
  const std::string x = gate_junit(checks, "ragkv-eval");
  CHECK(x.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n"));
  CHECK(x.find("<testsuite name=\"ragkv-eval\" tests=\"4\" failures=\"2\" errors=\"0\">") != std::string::npos);
  CHECK(x.find("<testcase classname=\"ragkv-eval.reuse\" name=\"min-agreement\"><failure message=\"first-token "
               "agreement 0.500") != std::string::npos);
  CHECK(x.find("<testcase classname=\"ragkv-eval.prefix\" name=\"max-kl\"><system-out>") != std::string::npos);
  const auto j = gate_json(checks, GateThresholds{});
  CHECK(j["passed"] == false);
  CHECK(j["verdicts"].size() == 2);
}

TEST_CASE("gate: a sweep whose reference did no damage of a kind has no recovery there, and the picture skips it") {
  // reuse keeps every first token (nothing to recover in agreement) but moves the KL.
  std::vector<EvalItem> items;
  for (int i = 0; i < 6; ++i) {
    EvalItem it;
    it.id = std::to_string(i);
    it.by_mode["full"] = answer(1, 0.0);
    it.by_mode["reuse"] = answer(1, 0.3, "x", 0.0);
    it.by_mode["blend@0.1"] = answer(1, 0.1, "x", 0.1);
    it.by_mode["blend@0.3"] = answer(1, 0.05, "x", 0.3);
    items.push_back(it);
  }
  const nlohmann::json s = eval_summary(items, "full", {"reuse", "blend@0.1", "blend@0.3"}, "reuse",
                                        {{"blend@0.1", 0.1}, {"blend@0.3", 0.3}});
  REQUIRE(s["modes"]["blend@0.1"]["recovery"]["first_token"].is_null());
  CHECK(has_tradeoff(s));
  test::TempDir dir("gate-plot-undefined");
  const TradeoffPlot p = write_tradeoff_plot(s, dir.path / "report");
  CHECK(read_file(p.data).find("# blend\n") != std::string::npos);
}

TEST_CASE("gate: a sweep's trade-off data holds one block per method and craft variant, points by compute, auto as one point") {
  std::vector<EvalItem> items = recorded(10);
  for (auto& it : items) {
    it.by_mode["blend@0.1"] = answer(1, 0.2, "x", 0.1);
    it.by_mode["blend@0.3"] = answer(1, 0.1, "x", 0.3);
    it.by_mode["blend/v@0.1"] = answer(1, 0.15, "x", 0.1);
    it.by_mode["craft@0.5"] = answer(1, 0.2, "x", 0.08);  // craft runs through its alphas
    it.by_mode["craft@0.05"] = answer(1, 0.3, "x", 0.01);
    it.by_mode["auto"] = answer(1, 0.1, "x", 0.05);
  }
  const nlohmann::json s = eval_summary(items, "full", {"reuse", "blend@0.1", "blend@0.3", "blend/v@0.1", "craft@0.5",
                                                        "craft@0.05", "auto"},
                                        "reuse", {{"blend@0.1", 0.1}, {"blend@0.3", 0.3}, {"blend/v@0.1", 0.1}});
  CHECK(has_tradeoff(s));
  CHECK_FALSE(has_tradeoff(eval_summary(recorded(10), "full", {"reuse", "blend"}, "reuse")));
  {  // two modes side by side, one point each, are a picture too: "on the frontier" is visible
    std::vector<EvalItem> two = recorded(10);
    for (auto& it : two) it.by_mode["auto"] = answer(1, 0.02, "x", 0.15);
    CHECK(has_tradeoff(eval_summary(two, "full", {"reuse", "blend", "auto"}, "reuse")));
  }
  test::TempDir dir("gate-plot");
  const TradeoffPlot p = write_tradeoff_plot(s, dir.path / "report");
  const std::string dat = read_file(p.data);
  // Blocks in name order: blend, blend/v, craft, reuse; blend's two points by compute.
  const size_t b = dat.find("# blend\n"), v = dat.find("# blend/v\n"), r = dat.find("# reuse\n");
  REQUIRE(b != std::string::npos);
  REQUIRE(v != std::string::npos);
  REQUIRE(r != std::string::npos);
  CHECK(b < v);
  CHECK(v < r);
  CHECK(dat.find("0.1 0.1 1 0.5 1 1\n0.3 0.3 1 0.75 1 1\n") != std::string::npos);
  // craft's block: α in the first column, its points by compute too, after blend/v.
  const size_t c = dat.find("# craft\n");
  REQUIRE(c != std::string::npos);
  CHECK(v < c);
  CHECK(c < r);
  CHECK(dat.find("0.05 0.01 1 0.25 1 1\n0.5 0.08 1 0.5 1 1\n", c) != std::string::npos);
  // auto: one point, first in name order, no ratio of its own.
  const size_t a = dat.find("# auto\n");
  REQUIRE(a != std::string::npos);
  CHECK(a < b);
  CHECK(dat.find("nan 0.05 1 0.75 1 1\n", a) < b);
  CHECK(read_file(p.script).find("plot 'report.dat' index 0 using 2:4") != std::string::npos);
  // The SVG exists when gnuplot ran; otherwise the note says why.
  if (p.svg.empty()) MESSAGE("no SVG: " << p.note);
  else CHECK(read_file(p.svg).find("<svg") != std::string::npos);
}

TEST_CASE("gate: the first step's top-2 probability gap, worked by hand") {
  CHECK(top2_probability_gap({0.0f, std::log(3.0f)}) == doctest::Approx(0.75 - 0.25));
  CHECK(top2_probability_gap({0.0f, 0.0f, std::log(2.0f)}) == doctest::Approx(0.5 - 0.25));
  CHECK(top2_probability_gap({1.0f, 1.0f, -5.0f}) == 0.0);  // a tie
  CHECK(top2_probability_gap({2.0f}) == 1.0);
}

TEST_CASE("gate: the margin fallback's rule, M or M/C") {
  const FallbackRule m = parse_fallback_rule("0.02");
  CHECK(m.margin == 0.02);
  CHECK(m.moved_margin == 0);
  CHECK(m.name() == "0.02");
  CHECK(m.applies(0.01, false));
  CHECK_FALSE(m.applies(0.03, true));
  const FallbackRule mc = parse_fallback_rule("0.005/0.05");
  CHECK(mc.name() == "0.005/0.05");
  CHECK(mc.applies(0.004, false));   // below M: always
  CHECK_FALSE(mc.applies(0.01, false));  // between M and C, the repair kept the first token
  CHECK(mc.applies(0.01, true));     // between M and C, the repair moved it
  CHECK_FALSE(mc.applies(0.06, true));
  CHECK_FALSE(parse_fallback_rule("0").active());
  CHECK(parse_fallback_rule("0/0.1").active());
  for (const char* bad : {"", "x", "1.5", "-0.1", "0.1/", "/0.1", "0.1/0.2/0.3", "0.1 "})
    CHECK_THROWS_WITH_AS(parse_fallback_rule(bad), doctest::Contains("expected M or M/C"), Error);
}

TEST_CASE("gate: a derived fallback recomputes what follows the exact prefix, and M/C reads the moved first token") {
  std::vector<EvalItem> items = recorded(3);
  for (size_t i = 0; i < items.size(); ++i) {
    EvalAnswer& b = items[i].by_mode["blend"];
    b.first_margin = 0.01;  // every one between M = 0.005 and C = 0.05
    b.composed = true;
    b.compute_fraction = 0.2;
    items[i].by_mode["full"].compute_fraction = 1.0;
  }
  items[0].by_mode["blend"].repair_moved = true;
  items[0].by_mode["blend"].exact_prefix_share = 0.25;
  items[1].by_mode["blend"].exact_prefix_share = 0.25;  // not moved: kept
  const std::vector<std::string> added = add_margin_fallbacks(items, "full", {"blend"}, {parse_fallback_rule("0.005/0.05")});
  REQUIRE(added == std::vector<std::string>{"blend fallback<0.005/0.05"});
  std::string mode;
  FallbackRule rule;
  REQUIRE(parse_fallback_mode_name(added[0], mode, rule));
  CHECK(rule.moved_margin == 0.05);
  const EvalAnswer &fell = items[0].by_mode.at(added[0]), &kept = items[1].by_mode.at(added[0]);
  CHECK(fell.fell_back);
  CHECK(fell.compute_fraction == doctest::Approx(0.2 + 0.75));  // the rows after the exact prefix, again
  CHECK_FALSE(kept.fell_back);
  CHECK_FALSE(items[2].by_mode.at(added[0]).fell_back);
  // With M alone every one falls back; a record without the share counts full's compute.
  const std::vector<std::string> all = add_margin_fallbacks(items, "full", {"blend"}, {parse_fallback_rule("0.02")});
  CHECK(items[0].by_mode.at(all[0]).compute_fraction == doctest::Approx(0.95));
  CHECK(items[2].by_mode.at(all[0]).compute_fraction == doctest::Approx(1.2));
}

TEST_CASE("gate: margin fallbacks derived from records: full's answer below M, both prefills counted") {
  std::vector<EvalItem> items = recorded(4);
  const double margins[] = {0.01, 0.2, 0.04, -1};  // -1: a record made before the margin was kept
  for (size_t i = 0; i < items.size(); ++i) {
    EvalAnswer& b = items[i].by_mode["blend"];
    b.first_margin = margins[i];
    b.composed = true;
    b.compute_fraction = 0.2;
    items[i].by_mode["full"].compute_fraction = 1.0;
  }
  items[2].by_mode["blend"].composed = false;  // nothing composed: never falls back
  items[0].by_mode["blend"].answer = "z";
  items[0].by_mode["blend"].output_ids = {3, 7};
  const std::vector<std::string> added = add_margin_fallbacks(items, "full", {"blend"}, {parse_fallback_rule("0.05")});
  REQUIRE(added == std::vector<std::string>{"blend fallback<0.05"});
  std::string mode;
  FallbackRule m;
  REQUIRE(parse_fallback_mode_name(added[0], mode, m));
  CHECK(mode == "blend");
  CHECK(m.margin == 0.05);
  CHECK(m.moved_margin == 0);
  CHECK_FALSE(parse_fallback_mode_name("blend@0.05", mode, m));
  const EvalAnswer &fell = items[0].by_mode.at(added[0]), &kept = items[1].by_mode.at(added[0]);
  CHECK(fell.fell_back);
  CHECK(fell.answer == items[0].by_mode["full"].answer);
  CHECK(fell.output_ids == items[0].by_mode["full"].output_ids);
  CHECK(fell.kl_first_token == 0.0);
  CHECK(fell.compute_fraction == doctest::Approx(1.2));
  CHECK(fell.ttft_ms == doctest::Approx(20));
  CHECK_FALSE(kept.fell_back);
  CHECK(kept.compute_fraction == doctest::Approx(0.2));
  CHECK_FALSE(items[2].by_mode.at(added[0]).fell_back);
  CHECK_FALSE(items[3].by_mode.at(added[0]).fell_back);
  const nlohmann::json s = eval_summary(items, "full", {"blend", added[0]}, "", {});
  CHECK(s["modes"][added[0]]["fallbacks"] == 1.0);
  CHECK_THROWS_WITH_AS(add_margin_fallbacks(items, "prefix", {"blend"}, {parse_fallback_rule("0.05")}),
                       doctest::Contains("a fallback answers as full does"), Error);
}
