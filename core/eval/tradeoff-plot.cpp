// Sweep data → stem.dat (one gnuplot data block per method), stem.gp, and gnuplot → stem.svg.
#include "core/eval/tradeoff-plot.h"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "core/eval/margin-fallback.h"
#include "core/rag/mode-spec.h"
#include "core/util/error.h"
#include "core/util/file-io.h"

extern char** environ;

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Point {
  double nominal, compute, ttft_ratio, rec_kl, rec_ft, first_token;
};

double or_nan(const json& v) { return v.is_null() ? std::nan("") : v.get<double>(); }
// A recovery is null where reuse did no damage of that kind (nothing to recover): NaN, no point.
double recovery_of(const json& m, const char* key) {
  if (!m.contains("recovery")) return std::nan("");
  const json& r = m["recovery"].value(key, json());
  return r.is_object() ? or_nan(r.value("mean", json())) : std::nan("");
}

// A mode's point: `nominal` first, then its compute, TTFT ratio, recoveries (reuse: 0, its own
// damage being the reference) and first-token agreement.
Point point_of(const json& m, double nominal, bool reuse) {
  return {nominal, or_nan(m.value("compute_fraction", json())), m.at("ttft_ratio").get<double>(),
          reuse ? 0.0 : recovery_of(m, "kl"), reuse ? 0.0 : recovery_of(m, "first_token"),
          m.at("first_token_match").get<double>()};
}

// Series name → points, from the summary's modes: blend variants by method, craft variants by
// ablation, reuse and auto alone (auto chooses per chunk, so it has no ratio to sweep: one point),
// and each mode's margin fallbacks (`eval --fallback-margins`) through their margins.
std::map<std::string, std::vector<Point>> series_of(const json& s) {
  std::map<std::string, std::vector<Point>> series;
  for (const auto& [name, m] : s.at("modes").items()) {
    std::string base;
    FallbackRule rule;
    if (parse_fallback_mode_name(name, base, rule)) {  // a margin fallback: one series per mode and kind of rule
      series[base + (rule.moved_margin > 0 ? " + fallback M/C" : " + fallback")].push_back(point_of(m, rule.margin, false));
      continue;
    }
    ModeSpec spec;
    try {
      spec = parse_mode_spec(name);
    } catch (const Error&) {
      continue;
    }
    std::string key;
    if (spec.mode == ReuseMode::reuse)
      key = "reuse";
    else if (spec.mode == ReuseMode::blend)
      key = spec.selection ? std::string("blend/") + selection_name(*spec.selection) : "blend";
    else if (spec.mode == ReuseMode::craft)  // through its alphas (the nominal column holds α)
      key = spec.ablation ? std::string("craft/") + craft_ablation_name(*spec.ablation) : "craft";
    else if (spec.mode == ReuseMode::auto_)
      key = "auto";
    else
      continue;
    const double nominal = spec.mode == ReuseMode::craft ? spec.ratio.value_or(std::nan(""))
                                                         : or_nan(m.value("nominal_ratio", json()));
    series[key].push_back(point_of(m, nominal, spec.mode == ReuseMode::reuse));
  }
  for (auto& [k, pts] : series)
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) { return a.compute < b.compute; });
  return series;
}

// Runs `gnuplot script` in dir (gnuplot reads the data by its file name); "" on success, else why not.
std::string run_gnuplot(const fs::path& dir, const fs::path& script) {
  pid_t pid;
  const std::string arg = script.string();
  char* argv[] = {const_cast<char*>("gnuplot"), const_cast<char*>(arg.c_str()), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addchdir_np(&actions, dir.c_str());
  const int rc = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return rc == ENOENT ? "gnuplot is not installed (make setup installs gnuplot-nox)"
                                   : fmt::format("gnuplot could not be started: {}", std::strerror(rc));
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return "gnuplot: wait failed";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "gnuplot failed on " + arg;
  return "";
}

}  // namespace

bool has_tradeoff(const json& summary) {
  size_t points = 0;
  for (const auto& [k, pts] : series_of(summary))
    if (k != "reuse") points += pts.size();
  return points >= 2;
}

TradeoffPlot write_tradeoff_plot(const json& summary, const fs::path& stem) {
  TradeoffPlot out;
  out.data = stem.string() + ".dat";
  out.script = stem.string() + ".gp";
  const fs::path svg = stem.string() + ".svg";
  const auto series = series_of(summary);

  std::string dat = "# ragkv eval sweep: one block per method\n";
  std::vector<std::string> names;
  for (const auto& [name, pts] : series) {
    dat += fmt::format("# {}\n# nominal_ratio(craft: alpha; fallback: margin) compute ttft_ratio recovery_kl recovery_first_token first_token_match\n", name);
    for (const Point& p : pts)
      dat += fmt::format("{:g} {:g} {:g} {:g} {:g} {:g}\n", p.nominal, p.compute, p.ttft_ratio, p.rec_kl, p.rec_ft,
                         p.first_token);
    dat += "\n\n";
    names.push_back(name);
  }
  write_file_atomic(out.data, {dat});

  // A mode and its margin fallbacks share a colour; the fallbacks are dashed (M) or dotted (M/C),
  // with their own point shapes.
  std::vector<std::string> bases;
  std::vector<int> colour, kind;
  for (const std::string& name : names) {
    std::string base = name;
    int k = 0;
    for (const auto& [suffix, kk] : {std::pair<std::string, int>{" + fallback M/C", 2}, {" + fallback", 1}})
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        base = name.substr(0, name.size() - suffix.size());
        k = kk;
        break;
      }
    const auto it = std::find(bases.begin(), bases.end(), base);
    colour.push_back(int(it - bases.begin()) + 1);
    if (it == bases.end()) bases.push_back(base);
    kind.push_back(k);
  }
  auto plots = [&](const char* x, const char* y) {
    static constexpr int kPoint[] = {7, 5, 9}, kDash[] = {1, 2, 3};
    std::vector<std::string> p;
    for (size_t i = 0; i < names.size(); ++i)
      p.push_back(fmt::format("'{}' index {} using {}:{} with linespoints lc {} dt {} pt {} title '{}'",
                              out.data.filename().string(), i, x, y, colour[i], kDash[kind[i]], kPoint[kind[i]],
                              names[i]));
    return fmt::format("{}", fmt::join(p, ", \\\n     "));
  };
  const std::string base = summary.at("baseline").get<std::string>();
  std::string gp = fmt::format(
      "# ragkv eval sweep; gnuplot {}\n"
      "set terminal svg size 1500,520 dynamic font 'sans,12' background rgb 'white'\n"
      "set output '{}'\n"
      "set datafile missing 'nan'\n"
      "set termoption noenhanced\n"  // mode names as written ('@' is markup in enhanced text)
      "set grid\n"
      "set offsets graph 0.03, graph 0.03, 0, 0\n"  // no point half hidden on the x range's edge
      "set key below font 'sans,10'\n"
      "set multiplot layout 1,3 title '{} queries, baseline {}: recovery of the damage reuse does, and agreement with {}'\n"
      "set xlabel 'compute (token-layers of every pass / full prefill)'\n"
      "set ylabel 'recovery of first-token KL'\n"
      "set yrange [-0.2:1.05]\n"
      "plot {}\n"
      "set ylabel 'recovery of first-token agreement'\n"
      "plot {}\n"
      "set xlabel 'TTFT / {}'\n"
      "set ylabel 'first-token agreement with {}'\n"
      "set yrange [*:1.02]\n"
      "plot {}\n"
      "unset multiplot\n",
      out.script.filename().string(), svg.filename().string(), summary.at("queries").get<size_t>(), base, base,
      plots("2", "4"), plots("2", "5"), base, base, plots("3", "6"));
  write_file_atomic(out.script, {gp});

  out.note = run_gnuplot(stem.has_parent_path() ? stem.parent_path() : fs::path("."), out.script.filename());
  if (out.note.empty()) out.svg = svg;
  return out;
}

}  // namespace ragkv
