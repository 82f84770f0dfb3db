// The tolerance of the attention mass passes on tensor cores — key totals (cuda/attention-key-mass.cu:
// each key row's probability summed over the query rows [first_row, n_q) and every head) and
// segment mass (cuda/attention-segment-mass.cu: each query row and head's probability summed over
// each segment of key rows) — against the f32 CPU reference, derived from f16 rounding as
// tests/attention-f16-bound.h derives the output's, and host mirrors of the kernels' arithmetic
// that check the derivation where no GPU is (tests/test-attention-f16.cpp); the GPU tests hold the
// kernels to the same bounds.
//
// The tensor-core attention's logits carry Q's rounding to f16: δ_j ≤ Δ for the query vector's
// visible keys (attention-f16-bound.h). Its m and l are those of its own logits, and the mass
// passes recompute the same logits, so each probability they sum is within a factor e^{±2Δ} of the
// exact one: |p'_j − p_j| ≤ p_j · (e^{2Δ} − 1). With f32 rounding on both sides (the sum l over
// n_visible terms, its rescales and up to 16 key ranges combined, exp and the division:
// (n_visible + 32)·ε each side) and the
// sum of n_terms probabilities into one value (n_terms · ε of it, each side):
//   |t'_j − t_j| ≤ Σ_vectors p_j · (e^{2Δ} − 1 + 2 (n_visible + 32) ε) + (2 n_terms + 8) ε t_j + 1e-7,
// n_terms = (n_q − first_row) · n_head for a key total, the segment's key count for a segment mass.
// A value no visible probability enters is exactly 0 on both sides, and its bound is 1e-7: a mask
// that lets one key too many through, or mass landing on the wrong key or segment, breaks it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/format/fp16.h"
#include "tests/attention-f16-bound.h"

namespace ragkv::test {

// Calls f(i, h, j, p_ij, factor) for every visible key j of every query row i ≥ first_row and
// head h: p_ij the exact probability (double, from the problem's f32 values), factor the bound's
// per-probability term e^{2Δ} − 1 + 2 (n_visible + 32) ε.
template <typename F>
void for_each_probability(const AttentionProblem& p, int64_t first_row, F&& f) {
  const int D = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t q_cols = int64_t(p.n_head) * D, kv_cols = int64_t(p.n_kv_head) * D;
  std::vector<double> s(size_t(p.n_kv));
  for (int64_t i = first_row; i < p.n_q; ++i)
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = p.q.data() + i * q_cols + int64_t(h) * D;
      const int64_t kv_off = int64_t(h / group) * D;
      double delta = 0, mx = -INFINITY;
      int64_t n_vis = 0;
      for (int64_t j = 0; j < p.n_kv; ++j) {
        if (!p.visible(i, j)) continue;
        ++n_vis;
        const float* kh = p.k.data() + j * kv_cols + kv_off;
        double dot = 0, abs_dot = 0;
        for (int d = 0; d < D; ++d) dot += double(qh[d]) * kh[d], abs_dot += std::fabs(double(qh[d]) * kh[d]);
        double x = double(p.scale) * dot;
        if (p.softcap > 0) x = p.softcap * std::tanh(x / p.softcap);
        s[size_t(j)] = x;
        mx = std::max(mx, x);
        delta = std::max(delta, double(p.scale) * (kF16Unit + 2 * D * kF32Unit) * abs_dot);
      }
      if (n_vis == 0) continue;
      double l = 0;
      for (int64_t j = 0; j < p.n_kv; ++j)
        if (p.visible(i, j)) l += std::exp(s[size_t(j)] - mx);
      const double factor = std::expm1(2 * delta) + 2 * double(n_vis + 32) * kF32Unit;
      for (int64_t j = 0; j < p.n_kv; ++j)
        if (p.visible(i, j)) f(i, h, j, std::exp(s[size_t(j)] - mx) / l, factor);
    }
}

// The kernels' arithmetic on the host: q rounded to f16, f32 logits, m and l from an online
// softmax over tiles of tile_keys rows (as attention-mma.cu leaves them), then f(i, h, j, p) with
// the f32 probability exp(s − m) / l of every visible key, keys in row order.
template <typename F>
void for_each_mirror_probability(const AttentionProblem& p, int64_t first_row, int tile_keys, F&& f) {
  const int D = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t q_cols = int64_t(p.n_head) * D, kv_cols = int64_t(p.n_kv_head) * D;
  std::vector<float> qh16(static_cast<size_t>(D)), s(size_t(p.n_kv));
  for (int64_t i = first_row; i < p.n_q; ++i)
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = p.q.data() + i * q_cols + int64_t(h) * D;
      for (int d = 0; d < D; ++d) qh16[size_t(d)] = fp16_to_fp32(fp32_to_fp16(qh[d]));
      const int64_t kv_off = int64_t(h / group) * D;
      float m = -INFINITY, l = 0;
      for (int64_t j0 = 0; j0 < p.n_kv; j0 += tile_keys) {
        const int64_t j1 = std::min(p.n_kv, j0 + tile_keys);
        float mx = -INFINITY;
        for (int64_t j = j0; j < j1; ++j) {
          s[size_t(j)] = p.visible(i, j) ? p.logit(qh16.data(), p.k.data() + j * kv_cols + kv_off) : -INFINITY;
          mx = std::max(mx, s[size_t(j)]);
        }
        const float mn = std::max(m, mx), ref = mn == -INFINITY ? 0.f : mn;
        const float alpha = std::exp(m - ref);
        m = mn;
        float sum = 0;
        for (int64_t j = j0; j < j1; ++j) sum += std::exp(s[size_t(j)] - ref);
        l = l * alpha + sum;
      }
      if (!(l > 0)) continue;
      for (int64_t j = 0; j < p.n_kv; ++j)
        if (s[size_t(j)] != -INFINITY) f(i, h, j, std::exp(s[size_t(j)] - m) / l);
    }
}

// ---- key totals

// The CPU backend's key totals (SegmentMass::key_totals from query row first_row) on the problem.
inline std::vector<float> cpu_key_totals(const AttentionProblem& p, int64_t first_row) {
  std::vector<float> totals;
  SegmentMass mass;
  mass.key_totals = true;
  mass.first_query = first_row;
  mass.out = &totals;
  cpu_attention(p, &mass);
  return totals;
}

// Per key row, the bound above.
inline std::vector<double> key_totals_f16_bound(const AttentionProblem& p, int64_t first_row) {
  const double n_terms = double((p.n_q - first_row) * p.n_head);
  std::vector<double> bound(size_t(p.n_kv), 1e-7), total(size_t(p.n_kv), 0.0);
  for_each_probability(p, first_row, [&](int64_t, int, int64_t j, double pj, double factor) {
    bound[size_t(j)] += pj * factor;
    total[size_t(j)] += pj;
  });
  for (size_t j = 0; j < bound.size(); ++j) bound[j] += (2 * n_terms + 8) * kF32Unit * total[j];
  return bound;
}

// The key-total kernels' arithmetic: the mirror's probabilities summed in f32 per key.
inline std::vector<float> key_totals_f16_mirror(const AttentionProblem& p, int64_t first_row, int tile_keys) {
  std::vector<float> totals(size_t(p.n_kv), 0.f);
  for_each_mirror_probability(p, first_row, tile_keys,
                              [&](int64_t, int, int64_t j, float pj) { totals[size_t(j)] += pj; });
  return totals;
}

// ---- segment mass

// Segment boundaries over n_kv key rows as the Cache-Craft callers meet them and more: rows before
// the first segment, an empty segment, segments that end inside a kernel tile, and a last
// boundary past n_kv (odd n_kv) or rows after the last segment (even); or, with
// tile_edges (n_kv > 256): segments from key 130 on, one starting on a tile edge (192, 256), as a
// first tile past the start of the keys and boundaries on tiles' edges need.
inline std::vector<int64_t> test_segments(int64_t n_kv, bool tile_edges = false) {
  if (tile_edges && n_kv > 256) return {130, 192, 256, n_kv};
  std::vector<int64_t> b = {std::min<int64_t>(3, n_kv), std::min<int64_t>(3, n_kv), n_kv / 5, n_kv / 5 + 37, n_kv / 2,
                            n_kv % 2 == 0 ? n_kv - std::min<int64_t>(7, n_kv) : n_kv + 5};
  std::sort(b.begin(), b.end());
  return b;
}

// The segment of key row j: the last s with seg_begin[s] ≤ j, or −1 when j lies outside
// [seg_begin[0], seg_begin[n_seg]) (such rows count for nothing).
inline int64_t segment_of(const std::vector<int64_t>& seg_begin, int64_t j) {
  const auto it = std::upper_bound(seg_begin.begin(), seg_begin.end(), j);
  const int64_t s = int64_t(it - seg_begin.begin()) - 1;
  return s >= 0 && s < int64_t(seg_begin.size()) - 1 ? s : -1;
}

// The CPU backend's segment mass [n_q][n_head][n_seg] on the problem.
inline std::vector<float> cpu_segment_mass(const AttentionProblem& p, const std::vector<int64_t>& seg_begin) {
  std::vector<float> mass;
  SegmentMass sm;
  sm.seg_begin = seg_begin;
  sm.out = &mass;
  cpu_attention(p, &sm);
  return mass;
}

// Per (row, head, segment), the bound above.
inline std::vector<double> segment_mass_f16_bound(const AttentionProblem& p, const std::vector<int64_t>& seg_begin) {
  const int64_t n_seg = int64_t(seg_begin.size()) - 1;
  std::vector<double> bound(size_t(p.n_q * p.n_head * n_seg), 1e-7), total(bound.size(), 0.0);
  for_each_probability(p, 0, [&](int64_t i, int h, int64_t j, double pj, double factor) {
    const int64_t s = segment_of(seg_begin, j);
    if (s < 0) return;
    const size_t at = size_t((i * p.n_head + h) * n_seg + s);
    bound[at] += pj * factor;
    total[at] += pj;
  });
  for (int64_t s = 0; s < n_seg; ++s) {
    const double n_terms = double(std::clamp<int64_t>(seg_begin[size_t(s + 1)], 0, p.n_kv) -
                                  std::clamp<int64_t>(seg_begin[size_t(s)], 0, p.n_kv));
    for (int64_t ih = 0; ih < p.n_q * p.n_head; ++ih)
      bound[size_t(ih * n_seg + s)] += (2 * n_terms + 8) * kF32Unit * total[size_t(ih * n_seg + s)];
  }
  return bound;
}

// The segment-mass kernel's arithmetic: the mirror's probabilities summed in f32 per segment.
inline std::vector<float> segment_mass_f16_mirror(const AttentionProblem& p, const std::vector<int64_t>& seg_begin,
                                                  int tile_keys) {
  const int64_t n_seg = int64_t(seg_begin.size()) - 1;
  std::vector<float> mass(size_t(p.n_q * p.n_head * n_seg), 0.f);
  for_each_mirror_probability(p, 0, tile_keys, [&](int64_t i, int h, int64_t j, float pj) {
    const int64_t s = segment_of(seg_begin, j);
    if (s >= 0) mass[size_t((i * p.n_head + h) * n_seg + s)] += pj;
  });
  return mass;
}

}  // namespace ragkv::test
