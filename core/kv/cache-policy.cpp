// The policies' names and the prefill cost model (profiled grid, online fit, fallback).
#include "core/kv/cache-policy.h"

#include <algorithm>
#include <cmath>

#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr EnumNames<CachePolicy, 3> kPolicyNames{{{
    {CachePolicy::pgdsf, "pgdsf"},
    {CachePolicy::gdsf, "gdsf"},
    {CachePolicy::lru, "lru"},
}}};

// The cell [i, i + 1] of ascending xs that holds x, the edge cell outside.
size_t cell(const std::vector<double>& xs, double x) {
  const size_t hi = size_t(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  return std::clamp<size_t>(hi == 0 ? 0 : hi - 1, 0, xs.size() - 2);
}

// Solves the 3×3 system a·c = b by Gaussian elimination with partial pivoting; false when singular.
bool solve3(double a[3][3], double b[3], double c[3]) {
  double m[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[i][j] = a[i][j];
    m[i][3] = b[i];
  }
  for (int col = 0; col < 3; ++col) {
    int piv = col;
    for (int r = col + 1; r < 3; ++r)
      if (std::fabs(m[r][col]) > std::fabs(m[piv][col])) piv = r;
    if (std::fabs(m[piv][col]) < 1e-12) return false;
    std::swap(m[piv], m[col]);
    for (int r = 0; r < 3; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (int k = col; k < 4; ++k) m[r][k] -= f * m[col][k];
    }
  }
  for (int i = 0; i < 3; ++i) c[i] = m[i][3] / m[i][i];
  return true;
}
}  // namespace

const char* cache_policy_name(CachePolicy p) { return kPolicyNames.name(p); }
CachePolicy parse_cache_policy(const std::string& s) { return kPolicyNames.parse(s, "cache policy"); }
std::vector<std::string> cache_policy_names() { return kPolicyNames.names(); }

double bilinear(const std::vector<double>& xs, const std::vector<double>& ys, const std::vector<std::vector<double>>& f,
                double x, double y) {
  const size_t i = cell(xs, x), j = cell(ys, y);
  const double tx = (x - xs[i]) / (xs[i + 1] - xs[i]), ty = (y - ys[j]) / (ys[j + 1] - ys[j]);
  return (1 - tx) * (1 - ty) * f[i][j] + (1 - tx) * ty * f[i][j + 1] + tx * (1 - ty) * f[i + 1][j] +
         tx * ty * f[i + 1][j + 1];
}

void PrefillCostModel::set_grid(std::vector<double> alphas, std::vector<double> betas,
                                std::vector<std::vector<double>> ms) {
  auto ascending = [](const std::vector<double>& v) {
    return v.size() >= 2 && std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  if (!ascending(alphas) || !ascending(betas))
    fail("prefill cost profile: the grid's cached and computed token counts must ascend, at least 2 of each");
  if (ms.size() != alphas.size() || std::any_of(ms.begin(), ms.end(), [&](const auto& r) { return r.size() != betas.size(); }))
    fail("prefill cost profile: {} x {} grid points expected", alphas.size(), betas.size());
  alphas_ = std::move(alphas);
  betas_ = std::move(betas);
  ms_ = std::move(ms);
}

void PrefillCostModel::observe(double alpha, double beta, double ms) {
  if (!(beta > 0) || !(ms >= 0) || !(alpha >= 0)) return;
  const double x[3] = {1.0, beta, alpha * beta};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) xtx_[i][j] += x[i] * x[j];
    xty_[i] += x[i] * ms;
  }
  ++n_obs_;
}

double PrefillCostModel::estimate_ms(double alpha, double beta) const {
  if (beta <= 0) return 0;
  if (has_grid()) return std::max(0.0, bilinear(alphas_, betas_, ms_, alpha, beta));
  if (n_obs_ >= 3) {
    double a[3][3], b[3], c[3];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) a[i][j] = xtx_[i][j];
      b[i] = xty_[i];
    }
    if (solve3(a, b, c)) {
      const double t = c[0] + c[1] * beta + c[2] * alpha * beta;
      if (t > 0) return t;
    }
  }
  return beta;
}

nlohmann::json PrefillCostModel::to_json() const {
  nlohmann::json j = {{"alphas", alphas_}, {"betas", betas_}, {"ms", ms_},
                      {"load_ms_per_token", {{"device", load_ms_per_token_[0]}, {"host", load_ms_per_token_[1]},
                                             {"disk", load_ms_per_token_[2]}}}};
  return j;
}

PrefillCostModel PrefillCostModel::from_json(const nlohmann::json& j) {
  PrefillCostModel m;
  try {
    m.set_grid(j.at("alphas").get<std::vector<double>>(), j.at("betas").get<std::vector<double>>(),
               j.at("ms").get<std::vector<std::vector<double>>>());
    const auto& l = j.at("load_ms_per_token");
    m.load_ms_per_token_[0] = l.at("device").get<double>();
    m.load_ms_per_token_[1] = l.at("host").get<double>();
    m.load_ms_per_token_[2] = l.at("disk").get<double>();
  } catch (const nlohmann::json::exception& e) {
    fail("prefill cost profile: {}", e.what());
  }
  return m;
}

}  // namespace ragkv
