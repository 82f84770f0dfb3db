// The tolerance of key totals on tensor cores (cuda/attention-key-mass.cu: each key row's softmax
// probability summed over the query rows [first_row, n_q) and every head) against the f32 CPU
// reference, derived from f16 rounding as tests/attention-f16-bound.h derives the output's, and a
// host mirror of the kernels' arithmetic that checks the derivation where no GPU is
// (tests/test-attention-f16.cpp); the GPU tests hold the kernels to the same bound.
//
// The tensor-core attention's logits carry Q's rounding to f16: δ_j ≤ Δ for the query vector's
// visible keys (attention-f16-bound.h). Its m and l are those of its own logits, and the key-total
// pass recomputes the same logits, so each probability it sums is within a factor e^{±2Δ} of the
// exact one: |p'_j − p_j| ≤ p_j · (e^{2Δ} − 1). With f32 rounding on both sides (the sum l over
// n_visible terms and its rescales, exp and the division: (n_visible + 16)·ε each side) and the
// sum over the n_terms = (n_q − first_row) · n_head vectors (n_terms · ε of the total):
//   |t'_j − t_j| ≤ Σ_vectors p_j · (e^{2Δ} − 1 + 2 (n_visible + 16) ε) + (n_terms + 8) ε t_j + 1e-7.
// A key no counted query sees has a total of exactly 0 on both sides, and its bound is 1e-7: a mask
// that lets one key too many through, or a total landing on the wrong key, breaks the bound.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/format/fp16.h"
#include "tests/attention-f16-bound.h"

namespace ragkv::test {

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

// Per key row, the bound above (probabilities in double from the problem's f32 values).
inline std::vector<double> key_totals_f16_bound(const AttentionProblem& p, int64_t first_row) {
  const int D = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t q_cols = int64_t(p.n_head) * D, kv_cols = int64_t(p.n_kv_head) * D;
  const double n_terms = double((p.n_q - first_row) * p.n_head);
  std::vector<double> bound(size_t(p.n_kv), 1e-7), total(size_t(p.n_kv), 0.0), s(size_t(p.n_kv));
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
        delta = std::max(delta, double(p.scale) * (kF16Unit + D * kF32Unit) * abs_dot);
      }
      if (n_vis == 0) continue;
      double l = 0;
      for (int64_t j = 0; j < p.n_kv; ++j)
        if (p.visible(i, j)) l += std::exp(s[size_t(j)] - mx);
      const double factor = std::expm1(2 * delta) + 2 * double(n_vis + 16) * kF32Unit;
      for (int64_t j = 0; j < p.n_kv; ++j) {
        if (!p.visible(i, j)) continue;
        const double pj = std::exp(s[size_t(j)] - mx) / l;
        bound[size_t(j)] += pj * factor;
        total[size_t(j)] += pj;
      }
    }
  for (size_t j = 0; j < bound.size(); ++j) bound[j] += (n_terms + 8) * kF32Unit * total[j];
  return bound;
}

// The kernels' arithmetic on the host: q rounded to f16, f32 logits, m and l from an online
// softmax over tiles of tile_keys rows (as attention-mma.cu leaves them), then exp(s − m) / l
// summed in f32 per key.
inline std::vector<float> key_totals_f16_mirror(const AttentionProblem& p, int64_t first_row, int tile_keys) {
  const int D = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t q_cols = int64_t(p.n_head) * D, kv_cols = int64_t(p.n_kv_head) * D;
  std::vector<float> totals(size_t(p.n_kv), 0.f), qh16(static_cast<size_t>(D)), s(size_t(p.n_kv));
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
        if (s[size_t(j)] != -INFINITY) totals[size_t(j)] += std::exp(s[size_t(j)] - m) / l;
    }
  return totals;
}

}  // namespace ragkv::test
