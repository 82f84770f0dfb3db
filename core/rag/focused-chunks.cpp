// Algorithm 1 of Cache-Craft (§3.2.2): focused chunks by change point of the question's
// cumulative attention.
#include "core/rag/focused-chunks.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/util/error.h"

namespace ragkv {

std::vector<size_t> split_focused(const std::vector<double>& scores) {
  const size_t k = scores.size();
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  auto all = [&] {
    std::vector<size_t> v(k);
    std::iota(v.begin(), v.end(), size_t(0));
    return v;
  };
  if (k < 3) return all();
  std::vector<double> diff(k - 1);
  double sum = 0;
  for (size_t i = 0; i + 1 < k; ++i) sum += diff[i] = scores[order[i]] - scores[order[i + 1]];
  if (!(sum > 0)) return all();
  // Lines 6–9, 1-based as written: p_i = diff_i / Σ diff (gap i lies between the i-th and the
  // (i+1)-th largest score); h_{i+1} − h_i = −p_{i+1}·log p_{i+1}; i* = argmax over i ∈ [1, k−2];
  // F = the top i* chunks. diff[i] (0-based) is gap i + 1.
  size_t best = 1;
  double best_growth = -1;
  for (size_t i = 1; i + 1 < k; ++i) {
    const double p = diff[i] / sum;  // p_{i+1}
    const double growth = p > 0 ? -p * std::log(p) : 0.0;
    if (growth > best_growth) {
      best_growth = growth;
      best = i;
    }
  }
  std::vector<size_t> focused(order.begin(), order.begin() + std::ptrdiff_t(best));  // top i*
  std::sort(focused.begin(), focused.end());
  return focused;
}

FocusDetector::FocusDetector(size_t n_chunks, int window) : n_(n_chunks), window_(window), cumulative_(n_chunks, 0.0) {
  if (window < 1) fail("internal: a focus window of {} layers", window);
}

bool FocusDetector::add_layer(int layer, const std::vector<double>& inter) {
  if (cutoff_) return false;
  if (inter.size() != n_) fail("internal: {} chunk scores for {} chunks", inter.size(), n_);
  for (size_t i = 0; i < n_; ++i) cumulative_[i] += inter[i];  // Eq. 15
  history_.push_back(split_focused(cumulative_));
  const size_t w = size_t(window_);
  if (history_.size() < w) return false;
  for (size_t i = history_.size() - w; i + 1 < history_.size(); ++i)
    if (history_[i] != history_.back()) return false;
  cutoff_ = layer;
  focused_ = history_.back();
  return true;
}

}  // namespace ragkv
