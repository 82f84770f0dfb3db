// The trade-off picture of an eval sweep (CacheBlend's Figures 9–11 plot quality
// against TTFT the same way): recovery of first-token KL and of first-token agreement against the
// real compute fraction, and first-token agreement against the TTFT ratio, one line per
// selection method (and craft ablation) through its ratios, reuse as the zero point, auto as one
// point. gnuplot renders it when it is installed (`make setup` installs gnuplot-nox); the data and
// the script are written either way, so the picture can be drawn elsewhere.
#pragma once
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace ragkv {

struct TradeoffPlot {
  std::filesystem::path data, script, svg;  // svg is empty when gnuplot was not found or failed
  std::string note;                         // why there is no SVG, for the user
};

// True when the summary holds a trade-off worth plotting: two points or more besides reuse (a
// sweep, a margin fallback's margins, or several modes — auto, blend, craft — side by side).
bool has_tradeoff(const nlohmann::json& summary);
// Writes stem.dat and stem.gp beside the report and runs gnuplot for stem.svg.
TradeoffPlot write_tradeoff_plot(const nlohmann::json& summary, const std::filesystem::path& stem);

}  // namespace ragkv
