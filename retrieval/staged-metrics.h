// Measurements over a staged search (RAGCache §5.3): the snapshots of its top-k slice by slice,
// and how early the final top-k appears — the head start speculative generation can get.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "retrieval/hnsw-index.h"

namespace ragkv {

struct StagedSnapshot {
  size_t work = 0;       // distance computations done when the snapshot was taken
  std::vector<Hit> top;  // top-k then, best first
};

// Runs s to its end in slices of `slice` distance computations, one snapshot per slice; the last
// snapshot is the final result.
std::vector<StagedSnapshot> run_staged_search(StagedSearch& s, size_t slice);

// Runs s to its end in slices of `slice` distance computations and returns the final top-k (the
// same as the unstaged search's). After each slice whose top-k is complete (`complete` hits:
// min(k, index size) — during the upper-level descent there is only one) and differs from the
// last one reported, calls on_change with it; the final top-k is always reported last (RAGCache
// §5.3: the candidates sent to the engine at the end of each stage, then the final result).
std::vector<Hit> run_staged_search(StagedSearch& s, size_t slice, size_t complete,
                                   const std::function<void(const std::vector<Hit>&)>& on_change);

// The fraction of the search work after which the final top-k first appears: the work of the
// earliest snapshot from which every snapshot holds the final top-k (same chunks, same order),
// over the total work. In a best-first search the top-k only improves, so once the final top-k
// has appeared it stays. The resolution is one slice: run with slice 1 for the exact value.
double final_topk_work_fraction(const std::vector<StagedSnapshot>& snaps);

struct FractionSummary {
  size_t n = 0;
  double mean = 0, median = 0, p90 = 0;  // percentiles with linear interpolation (numpy's default)
};
FractionSummary summarize_fractions(std::vector<double> fractions);

}  // namespace ragkv
