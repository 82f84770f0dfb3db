// Cache-Craft variant choice: CCI, β, γ, CFO (cache-craft.txt Eq. 6–12) and the tokens to fix (Eq. 14).
#include "core/rag/variant-choice.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace ragkv {

double cache_context_impact(double a_bar, double b_bar) {
  if (a_bar <= 0) return 0.5;
  if (b_bar <= 0) return 1.0;
  return 1.0 / (1.0 + std::exp(-a_bar / b_bar));
}

double prefix_overlap(const std::vector<std::string>& old_context, const std::vector<float>& inter,
                      const std::vector<std::string>& new_context) {
  double shared = 0, total = 0;
  for (size_t j = 0; j < old_context.size() && j < inter.size(); ++j) {
    total += inter[j];
    if (std::find(new_context.begin(), new_context.end(), old_context[j]) != new_context.end()) shared += inter[j];
  }
  return total > 0 ? shared / total : 0.0;
}

double order_penalty(const std::vector<std::string>& old_context, const std::vector<std::string>& new_context) {
  // A_old: the common chunks in the old order; their positions in the new context.
  std::map<std::string, size_t> new_pos;
  for (size_t i = 0; i < new_context.size(); ++i) new_pos.emplace(new_context[i], i);
  std::vector<size_t> pos;
  for (const std::string& id : old_context)
    if (const auto it = new_pos.find(id); it != new_pos.end()) pos.push_back(it->second);
  const size_t m = pos.size();
  if (m < 2) return 0.0;
  size_t discordant = 0;
  for (size_t i = 0; i < m; ++i)
    for (size_t j = i + 1; j < m; ++j) discordant += pos[i] > pos[j];
  return double(discordant) / (double(m) * double(m - 1) / 2.0);
}

double cache_fix_overhead(double alpha, double cci, double beta, double gamma) {
  return std::clamp(alpha * cci * (1.0 - beta * (1.0 - gamma)), 0.0, 1.0);
}

VariantChoice choose_variant(const std::vector<VariantCandidate>& candidates, const std::vector<std::string>& new_context,
                             int64_t n_tokens, const CraftParams& params) {
  double max_cci = 0.5;
  bool any_stats = false;
  for (const VariantCandidate& c : candidates)
    if (c.stats) {
      max_cci = any_stats ? std::max(max_cci, double(c.stats->cci)) : double(c.stats->cci);
      any_stats = true;
    }
  VariantChoice best;
  bool have = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const VariantCandidate& c = candidates[i];
    VariantChoice v;
    v.index = i;
    v.exact = c.key.context == new_context && c.key.donor.empty();  // (a donor cache is never exact)
    if (v.exact) {  // the chain matches: the KV is what this prompt computes there
      best = v;
      return best;
    }
    v.cci = c.stats ? double(c.stats->cci) : max_cci;
    if (c.stats && params.use_beta) {
      v.beta = prefix_overlap(c.key.context, c.stats->inter, new_context);
      v.gamma = order_penalty(c.key.context, new_context);
    }
    v.cfo = cache_fix_overhead(params.alpha, v.cci, v.beta, v.gamma);
    if (!have || v.cfo <= best.cfo) {
      best = v;
      have = true;
    }
  }
  best.fix_tokens = std::min<int64_t>(n_tokens, int64_t(std::ceil(best.cfo * double(n_tokens) - 1e-9)));
  return best;
}

std::vector<int32_t> craft_fix_tokens(const std::vector<VariantCandidate>& candidates, size_t chosen, int64_t count,
                                      int64_t n_tokens) {
  const std::vector<uint32_t>* ranking = nullptr;
  if (candidates.at(chosen).stats && !candidates[chosen].stats->ranked.empty()) {
    ranking = &candidates[chosen].stats->ranked;
  } else {
    for (const VariantCandidate& c : candidates)
      if (c.stats && !c.stats->ranked.empty()) ranking = &c.stats->ranked;  // the latest variant's
  }
  count = std::clamp<int64_t>(count, 0, n_tokens);
  std::vector<int32_t> out;
  std::vector<uint8_t> taken(size_t(n_tokens), 0);
  if (ranking)
    for (uint32_t t : *ranking) {
      if (int64_t(out.size()) >= count) break;
      if (int64_t(t) < n_tokens && !taken[t]) {
        taken[t] = 1;
        out.push_back(int32_t(t));
      }
    }
  for (int64_t t = 0; int64_t(out.size()) < count && t < n_tokens; ++t)
    if (!taken[size_t(t)]) out.push_back(int32_t(t));
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int32_t> random_fix_tokens(int64_t count, int64_t n_tokens, uint64_t seed) {
  std::vector<int32_t> all(size_t(std::max<int64_t>(n_tokens, 0)));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(size_t(std::clamp<int64_t>(count, 0, n_tokens)));
  std::sort(all.begin(), all.end());
  return all;
}

}  // namespace ragkv
