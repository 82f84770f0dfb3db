// Staged-search measurements: snapshots slice by slice and the work fraction after which the
// final top-k appears (RAGCache §5.3's speculative head start), with median/p90 summaries.
#include "retrieval/staged-metrics.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace ragkv {

std::vector<StagedSnapshot> run_staged_search(StagedSearch& s, size_t slice) {
  std::vector<StagedSnapshot> snaps;
  while (!s.done()) {
    s.step(slice);
    snaps.push_back(StagedSnapshot{s.work(), s.current()});
  }
  return snaps;
}

std::vector<Hit> run_staged_search(StagedSearch& s, size_t slice, size_t complete,
                                   const std::function<void(const std::vector<Hit>&)>& on_change) {
  std::vector<Hit> reported;
  bool any = false;
  auto report = [&](const std::vector<Hit>& top) {
    if (any && top == reported) return;
    reported = top;
    any = true;
    on_change(top);
  };
  while (!s.done()) {
    const std::vector<Hit>& top = s.step(slice);
    if (!s.done() && top.size() >= complete) report(top);
  }
  report(s.current());
  return s.current();
}

double final_topk_work_fraction(const std::vector<StagedSnapshot>& snaps) {
  if (snaps.empty()) fail("final_topk_work_fraction: no snapshots");
  const auto& final_top = snaps.back().top;
  size_t first = snaps.size() - 1;
  while (first > 0 && snaps[first - 1].top == final_top) --first;
  const size_t total = snaps.back().work;
  return total == 0 ? 1.0 : double(snaps[first].work) / double(total);
}

namespace {
double percentile(const std::vector<double>& sorted, double q) {
  const double pos = q * double(sorted.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}
}  // namespace

FractionSummary summarize_fractions(std::vector<double> v) {
  FractionSummary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  s.median = percentile(v, 0.5);
  s.p90 = percentile(v, 0.9);
  return s;
}

}  // namespace ragkv
