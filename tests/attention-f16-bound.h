// The tolerance of the tensor-core attention (cuda/attention-mma.cu) against the f32 CPU
// reference, derived from f16 rounding per query, and a host mirror of the kernel's arithmetic
// that checks the derivation where no GPU is (tests/test-attention-f16.cpp); the GPU test
// (tests/test-cuda-attention.cpp) holds the kernel to the same bound.
//
// The kernel rounds q to f16 (K and V are f16 on both sides), sums products in f32, and rounds
// P = exp(S − m) to f16 before P·V while l sums the unrounded values. With u = 2⁻¹¹ (f16 unit
// roundoff) and ε = 2⁻²⁴ (f32):
//   logit error  δ_j ≤ scale · (u + 2·D·ε) · Σ_d |q_d k_jd|      (softcap only shrinks it: tanh' ≤ 1;
//                                                                  2·D·ε: f32 sums on both sides)
//   Δ = max δ_j over the query's visible keys; each probability then moves by a factor within
//   e^{±2Δ}, so Σ_j |p'_j − p_j| ≤ e^{2Δ} − 1, and
//   |o'_d − o_d| ≤ (e^{2Δ} − 1 + u + (n_visible + 32)·ε) · max_j |v_jd| + 1e-6
// (the u for P's rounding; (n + 32)·ε for f32 sums over n keys, the running rescales and the
// combination of up to 16 key ranges when the kernel splits the keys). The
// bound is per element and worst case; a mask or index error moves an output by a sizeable part
// of max |v|, and the bound is loose (the mirror's worst error is 1–4 % of it), so the normalised
// mean squared error Σ (got − ref)² / Σ ref² must also stay under kMmaNmse, about 60 times the
// largest the host mirror shows over its cases (8e-8) and 20 times below what one key too many in
// the mask or two swapped V rows give.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "core/backend/cpu-backend.h"
#include "core/format/fp16.h"

namespace ragkv::test {

constexpr double kF16Unit = 1.0 / 2048;               // 2^-11
constexpr double kF32Unit = 1.0 / (1 << 24);          // 2^-24
constexpr double kMmaNmse = 5e-6;

struct AttentionProblem {
  std::vector<float> q;        // [n_q][n_head · D], f32
  std::vector<float> k, v;     // [n_kv][n_kv_head · D], values exactly representable in f16
  std::vector<int32_t> q_pos, k_pos;
  int64_t n_q = 0, n_kv = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  float scale = 0, softcap = 0;
  int window = 0;
  bool causal = true;

  AttentionParams params() const {
    AttentionParams ap;
    ap.n_head = n_head;
    ap.n_kv_head = n_kv_head;
    ap.head_dim = head_dim;
    ap.scale = scale;
    ap.sliding_window = window;
    ap.softcap = softcap;
    ap.causal = causal;
    return ap;
  }
  bool visible(int64_t i, int64_t j) const {
    if (!causal) return true;
    const int64_t qp = q_pos[size_t(i)], kp = k_pos[size_t(j)];
    return kp <= qp && (window <= 0 || kp > qp - window);
  }
  float logit(const float* qh, const float* kh) const {  // scale · q·k in f32, then softcap
    float dot = 0;
    for (int d = 0; d < head_dim; ++d) dot += qh[d] * kh[d];
    float x = scale * dot;
    if (softcap > 0) x = softcap * std::tanh(x / softcap);
    return x;
  }
};

struct ProblemSpec {
  const char* what;
  int head_dim, n_head, n_kv_head;
  int64_t n_q, n_kv;
  bool shuffled = false;  // key rows in a random position order, queries at random positions
                          // (selective recompute); else prefill: queries are the last n_q keys
  int window = 0;
  float softcap = 0;
  bool causal = true;
};

// q ∈ [−4, 4], k ∈ [−1, 1], v ∈ [−2, 2] (K and V rounded to f16 values), scale 1/√D.
inline AttentionProblem make_problem(const ProblemSpec& s, uint32_t seed) {
  std::mt19937 rng(seed);
  AttentionProblem p;
  p.n_q = s.n_q, p.n_kv = s.n_kv, p.n_head = s.n_head, p.n_kv_head = s.n_kv_head, p.head_dim = s.head_dim;
  p.scale = 1.f / std::sqrt(float(s.head_dim));
  p.softcap = s.softcap, p.window = s.window, p.causal = s.causal;
  const auto fill = [&](std::vector<float>& x, size_t n, float lim, bool f16) {
    std::uniform_real_distribution<float> dist(-lim, lim);
    x.resize(n);
    for (float& e : x) e = f16 ? fp16_to_fp32(fp32_to_fp16(dist(rng))) : dist(rng);
  };
  fill(p.q, size_t(s.n_q * s.n_head * s.head_dim), 4.f, false);
  fill(p.k, size_t(s.n_kv * s.n_kv_head * s.head_dim), 1.f, true);
  fill(p.v, size_t(s.n_kv * s.n_kv_head * s.head_dim), 2.f, true);
  p.k_pos.resize(size_t(s.n_kv));
  std::iota(p.k_pos.begin(), p.k_pos.end(), 0);
  if (s.shuffled) {
    std::vector<int32_t> rows = p.k_pos;
    std::shuffle(rows.begin(), rows.end(), rng);
    p.q_pos.assign(rows.begin(), rows.begin() + s.n_q);
    std::shuffle(p.k_pos.begin(), p.k_pos.end(), rng);
  } else {
    for (int64_t i = 0; i < s.n_q; ++i) p.q_pos.push_back(int32_t(s.n_kv - s.n_q + i));
  }
  return p;
}

// Per element of the output [n_q][n_head · D], the bound above.
inline std::vector<double> attention_f16_bound(const AttentionProblem& p) {
  const int D = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t q_cols = int64_t(p.n_head) * D, kv_cols = int64_t(p.n_kv_head) * D;
  std::vector<double> bound(size_t(p.n_q * q_cols), 1e-6);
  for (int64_t i = 0; i < p.n_q; ++i)
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = p.q.data() + i * q_cols + int64_t(h) * D;
      const int64_t kv_off = int64_t(h / group) * D;
      double delta = 0;
      int64_t n_vis = 0;
      std::vector<double> vmax(static_cast<size_t>(D), 0.0);
      for (int64_t j = 0; j < p.n_kv; ++j) {
        if (!p.visible(i, j)) continue;
        ++n_vis;
        const float* kh = p.k.data() + j * kv_cols + kv_off;
        const float* vh = p.v.data() + j * kv_cols + kv_off;
        double abs_dot = 0;
        for (int d = 0; d < D; ++d) {
          abs_dot += std::fabs(double(qh[d]) * double(kh[d]));
          vmax[size_t(d)] = std::max(vmax[size_t(d)], std::fabs(double(vh[d])));
        }
        delta = std::max(delta, double(p.scale) * (kF16Unit + 2 * D * kF32Unit) * abs_dot);
      }
      if (n_vis == 0) continue;  // the output is exactly 0 on both sides
      const double factor = std::expm1(2 * delta) + kF16Unit + double(n_vis + 32) * kF32Unit;
      for (int d = 0; d < D; ++d) bound[size_t(i * q_cols + int64_t(h) * D + d)] += factor * vmax[size_t(d)];
    }
  return bound;
}

// The kernel's arithmetic on the host: q rounded to f16, f32 logits, an online softmax over
// tiles of tile_keys rows in row order, P rounded to f16 for P·V, l summed unrounded, O / l.
inline std::vector<float> attention_f16_mirror(const AttentionProblem& p, int tile_keys) {
  const int D = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t q_cols = int64_t(p.n_head) * D, kv_cols = int64_t(p.n_kv_head) * D;
  std::vector<float> out(size_t(p.n_q * q_cols), 0.f), qh16(static_cast<size_t>(D)), o(static_cast<size_t>(D));
  for (int64_t i = 0; i < p.n_q; ++i)
    for (int h = 0; h < p.n_head; ++h) {
      const float* qh = p.q.data() + i * q_cols + int64_t(h) * D;
      for (int d = 0; d < D; ++d) qh16[size_t(d)] = fp16_to_fp32(fp32_to_fp16(qh[d]));
      const int64_t kv_off = int64_t(h / group) * D;
      float m = -INFINITY, l = 0;
      std::fill(o.begin(), o.end(), 0.f);
      for (int64_t j0 = 0; j0 < p.n_kv; j0 += tile_keys) {
        const int64_t j1 = std::min(p.n_kv, j0 + tile_keys);
        std::vector<float> s(size_t(j1 - j0), -INFINITY);
        float mx = -INFINITY;
        for (int64_t j = j0; j < j1; ++j) {
          if (!p.visible(i, j)) continue;
          s[size_t(j - j0)] = p.logit(qh16.data(), p.k.data() + j * kv_cols + kv_off);
          mx = std::max(mx, s[size_t(j - j0)]);
        }
        const float mn = std::max(m, mx), ref = mn == -INFINITY ? 0.f : mn;
        const float alpha = std::exp(m - ref);
        m = mn;
        float sum = 0;
        for (float& x : s) sum += (x = std::exp(x - ref));
        l = l * alpha + sum;
        for (float& x : o) x *= alpha;
        for (int64_t j = j0; j < j1; ++j) {
          const float pj = fp16_to_fp32(fp32_to_fp16(s[size_t(j - j0)]));
          const float* vh = p.v.data() + j * kv_cols + kv_off;
          for (int d = 0; d < D; ++d) o[size_t(d)] += pj * vh[d];
        }
      }
      const float inv = l > 0 ? 1.f / l : 0.f;
      for (int d = 0; d < D; ++d) out[size_t(i * q_cols + int64_t(h) * D + d)] = o[size_t(d)] * inv;
    }
  return out;
}

// The CPU backend's attention (the f32 reference) on the problem, K and V as f16 tensors, with
// the segment mass or key totals `mass` asks for.
inline std::vector<float> cpu_attention(const AttentionProblem& p, SegmentMass* mass = nullptr) {
  auto cpu = make_cpu_backend(1);
  const int64_t q_cols = int64_t(p.n_head) * p.head_dim, kv_cols = int64_t(p.n_kv_head) * p.head_dim;
  const int64_t kv_rows = std::max<int64_t>(p.n_kv, 1);
  std::vector<f16_t> k16(size_t(kv_rows * kv_cols)), v16(size_t(kv_rows * kv_cols));
  for (size_t e = 0; e < p.k.size(); ++e) k16[e] = fp32_to_fp16(p.k[e]), v16[e] = fp32_to_fp16(p.v[e]);
  Tensor qt = cpu->alloc(DType::f32, p.n_q, q_cols), ot = cpu->alloc(DType::f32, p.n_q, q_cols);
  Tensor kt = cpu->alloc(DType::f16, kv_rows, kv_cols), vt = cpu->alloc(DType::f16, kv_rows, kv_cols);
  cpu->upload(qt, p.q.data());
  cpu->upload(kt, k16.data());
  cpu->upload(vt, v16.data());
  cpu->attention(qt, p.q_pos, kt, vt, p.k_pos, p.n_kv, p.params(), ot, mass);
  std::vector<float> out(size_t(p.n_q * q_cols));
  cpu->download(ot, out.data());
  return out;
}

struct BoundCheck {
  int64_t over = 0;        // elements past their bound
  double worst_ratio = 0;  // max |got − ref| / bound
  double nmse = 0;         // Σ (got − ref)² / Σ ref²
  int64_t nonfinite = 0;
};

inline BoundCheck check_against_bound(const std::vector<float>& got, const std::vector<float>& ref,
                                      const std::vector<double>& bound) {
  BoundCheck c;
  double num = 0, den = 0;
  for (size_t e = 0; e < ref.size(); ++e) {
    if (!std::isfinite(got[e])) {
      ++c.nonfinite;
      continue;
    }
    const double err = std::fabs(double(got[e]) - double(ref[e]));
    c.over += err > bound[e];
    c.worst_ratio = std::max(c.worst_ratio, err / bound[e]);
    num += err * err;
    den += double(ref[e]) * double(ref[e]);
  }
  c.nmse = den > 0 ? num / den : num;
  return c;
}

}  // namespace ragkv::test
