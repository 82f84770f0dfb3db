// Cache-Craft's focused-chunk early termination (cache-craft.txt §3.2.2, Algorithm 1): layer by
// layer, the question's attention to each chunk is accumulated (Eq. 15); the chunks are split
// where the sorted cumulative scores change most (a change point by entropy of the gaps); once
// the split has named the same chunks for w consecutive layers, those are the focused chunks and
// the recompute of the others stops after that layer (L*).
#pragma once
#include <cstddef>
#include <optional>
#include <vector>

namespace ragkv {

// Lines 4–9 of Algorithm 1 on one layer's cumulative scores, as the paper writes them (1-based):
// gaps diff_i = s_(i) − s_(i+1) of the scores sorted descending, p_i = diff_i / Σ diff,
// h_i = −Σ_{j≤i} p_j log p_j, i* = argmax_{i ∈ [1, k−2]} (h_{i+1} − h_i) (first on ties), and
// F = the top i* chunks. Returns F as indices into scores, ascending; every chunk when k < 3 or
// all scores tie (no gap to split at).
std::vector<size_t> split_focused(const std::vector<double>& scores);

class FocusDetector {
 public:
  // window: Algorithm 1's w (≥ 1).
  FocusDetector(size_t n_chunks, int window);
  // Adds layer l's inter(C_i, U) for every chunk (l = 0, 1, … in order); returns true on the layer
  // the focused set is decided (lines 11–13), false before and after.
  bool add_layer(int layer, const std::vector<double>& inter);
  bool decided() const { return cutoff_.has_value(); }
  std::optional<int> cutoff_layer() const { return cutoff_; }  // L*
  const std::vector<size_t>& focused() const { return focused_; }  // F*, ascending

 private:
  size_t n_;
  int window_;
  std::vector<double> cumulative_;
  std::vector<std::vector<size_t>> history_;  // F per layer
  std::optional<int> cutoff_;
  std::vector<size_t> focused_;
};

}  // namespace ragkv
