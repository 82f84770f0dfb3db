// Tiled causal attention for prompts on the CPU. Keys are cut into tiles of kAttnTile rows aligned
// to absolute row indices; each query row walks the tiles that hold its visible keys in order,
// keeping a running maximum m, sum l and unnormalised output o (the online softmax of
// FlashAttention, Dao et al. 2022, Algorithm 1: m' = max(m, max_j s_j), l' = e^(m − m')·l +
// Σ_j e^(s_j − m'), o' = e^(m − m')·o + Σ_j e^(s_j − m')·v_j, output o/l). The scores of a tile
// live in a few KB instead of a [block][n_kv] matrix written and read three times, threads take
// whole (head, block) tasks instead of splitting each small SGEMM, and a sliding-window layer
// converts only the keys its queries see (bench/results, 2026-11-26).
#include "core/backend/cpu-attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/backend/exp-f32.h"
#include "core/backend/quant-kernels.h"
#include "core/format/fp16.h"

namespace ragkv {

namespace {

constexpr int64_t kT = kAttnTile;
constexpr int64_t kBlockRows = 32;  // query rows per task: o, m and l of a block stay in L1/L2
constexpr int kGroupRows = 4;       // query rows per register tile

// One query row's visible key rows [lo, hi).
struct Run {
  int64_t lo, hi;
};

// Folds one tile's scores s[0, n) of a row into its running state: the row sees s[a, b). Writes
// the probabilities e^(s_j − m') to p (0 outside [a, b) and up to kT) and rescales o by
// e^(m − m').
void fold_tile(float* s, int64_t a, int64_t b, float softcap, float& m, float& l, float* o, int dim, float* p) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (softcap > 0)
    for (int64_t j = a; j < b; ++j) s[j] = softcap * std::tanh(s[j] / softcap);
  std::fill(s, s + a, -kInf);
  std::fill(s + b, s + kT, -kInf);
  // Whole tiles in eight fixed lanes (the loops vectorise; bounds a, b would leave them scalar).
  float lane[8];
  std::fill(lane, lane + 8, -kInf);
  for (int64_t j0 = 0; j0 < kT; j0 += 8)
    for (int u = 0; u < 8; ++u) lane[u] = std::max(lane[u], s[j0 + u]);
  float mx = -kInf;
  for (float x : lane) mx = std::max(mx, x);
  const float m_new = std::max(m, mx);
  for (int64_t j = 0; j < kT; ++j) {
    // e^(−d) with d = m' − s ≥ 0 clamped to 87 (exp_f32's range; masked keys too, zeroed below);
    // non-negative floats order like their bits, so the clamp is an integer min.
    const float d = std::bit_cast<float>(std::min(std::bit_cast<int32_t>(m_new - s[j]), std::bit_cast<int32_t>(87.f)));
    p[j] = exp_f32(-d);
  }
  std::fill(p, p + a, 0.f);
  std::fill(p + b, p + kT, 0.f);
  // Σ p in the same fixed lanes, then the lanes in order: the same bits wherever the buffers lie.
  std::fill(lane, lane + 8, 0.f);
  for (int64_t j0 = 0; j0 < kT; j0 += 8)
    for (int u = 0; u < 8; ++u) lane[u] += p[j0 + u];
  float sum = 0.f;
  for (float x : lane) sum += x;
  if (m == -std::numeric_limits<float>::infinity()) {
    l = sum;  // the first tile this row sees: o is still zero
  } else {
    const float corr = exp_f32(-std::min(m_new - m, 87.f));
    l = l * corr + sum;
    if (corr != 1.f)
      for (int c = 0; c < dim; ++c) o[c] *= corr;
  }
  m = m_new;
}

}  // namespace

void attention_tiled(const QuantKernels& kernels, const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k,
                     const Tensor& v, std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                     const Tensor& out, int threads) {
  const int hd = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t n_q = q.rows, q_cols = int64_t(p.n_head) * hd, kv_cols = int64_t(p.n_kv_head) * hd;
  const auto kp = k_pos.first(static_cast<size_t>(n_kv));

  std::vector<Run> run(static_cast<size_t>(n_q));
  int64_t lo_all = n_kv, hi_all = 0;
  for (int64_t i = 0; i < n_q; ++i) {
    const int32_t qp = q_pos[size_t(i)];
    Run& r = run[size_t(i)];
    r.hi = std::upper_bound(kp.begin(), kp.end(), qp) - kp.begin();
    r.lo = p.sliding_window > 0 ? std::upper_bound(kp.begin(), kp.begin() + r.hi, qp - p.sliding_window) - kp.begin() : 0;
    if (r.lo < r.hi) {
      lo_all = std::min(lo_all, r.lo);
      hi_all = std::max(hi_all, r.hi);
    }
  }
  float* o_all = out.as<float>();
  if (lo_all >= hi_all) {  // no query sees a key
    std::fill(o_all, o_all + n_q * q_cols, 0.f);
    return;
  }

  // The visible tiles of each KV head in f32: K transposed per tile ([hd][kT], zero past n_kv),
  // V as rows ([kT][hd]).
  const int64_t t0 = lo_all / kT, n_tiles = (hi_all + kT - 1) / kT - t0;
  const int64_t tile_floats = kT * hd, head_floats = n_tiles * tile_floats;
  std::vector<float> kt(static_cast<size_t>(p.n_kv_head * head_floats)), vt(kt.size());
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> row(static_cast<size_t>(hd));  // one K row before its transposition
#pragma omp for collapse(2) schedule(static)
    for (int g = 0; g < p.n_kv_head; ++g)
      for (int64_t t = 0; t < n_tiles; ++t) {
        float* ktile = kt.data() + g * head_floats + t * tile_floats;
        float* vtile = vt.data() + g * head_floats + t * tile_floats;
        for (int64_t j = 0; j < kT; ++j) {
          const int64_t key = (t0 + t) * kT + j;
          if (key >= n_kv) {
            for (int c = 0; c < hd; ++c) ktile[c * kT + j] = 0.f;
            std::fill(vtile + j * hd, vtile + (j + 1) * hd, 0.f);
            continue;
          }
          const int64_t at = key * kv_cols + int64_t(g) * hd;
          if (k.dtype == DType::f16) fp16_to_fp32_row(k.as<f16_t>() + at, row.data(), hd);
          else std::memcpy(row.data(), k.as<float>() + at, size_t(hd) * sizeof(float));
          for (int c = 0; c < hd; ++c) ktile[c * kT + j] = row[size_t(c)];
          if (v.dtype == DType::f16) fp16_to_fp32_row(v.as<f16_t>() + at, vtile + j * hd, hd);
          else std::memcpy(vtile + j * hd, v.as<float>() + at, size_t(hd) * sizeof(float));
        }
      }
  }

  const int64_t n_blocks = (n_q + kBlockRows - 1) / kBlockRows;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> o(static_cast<size_t>(kBlockRows * hd)), s(static_cast<size_t>(kGroupRows * kT)),
        pr(s.size());
    std::vector<float> m(kBlockRows), l(kBlockRows);
#pragma omp for collapse(2) schedule(dynamic, 1)
    for (int h = 0; h < p.n_head; ++h)
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int g = h / group;
        const int64_t i0 = b * kBlockRows, nb = std::min(kBlockRows, n_q - i0);
        std::fill(o.begin(), o.end(), 0.f);
        std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
        std::fill(l.begin(), l.end(), 0.f);
        int64_t blo = n_kv, bhi = 0;
        for (int64_t i = i0; i < i0 + nb; ++i)
          if (run[size_t(i)].lo < run[size_t(i)].hi) {
            blo = std::min(blo, run[size_t(i)].lo);
            bhi = std::max(bhi, run[size_t(i)].hi);
          }
        for (int64_t t = blo / kT; t * kT < bhi; ++t) {
          const float* ktile = kt.data() + g * head_floats + (t - t0) * tile_floats;
          const float* vtile = vt.data() + g * head_floats + (t - t0) * tile_floats;
          const int64_t key0 = t * kT, n = std::min(kT, n_kv - key0);
          for (int64_t r0 = 0; r0 < nb; r0 += kGroupRows) {
            const int nr = int(std::min<int64_t>(kGroupRows, nb - r0));
            bool sees[kGroupRows] = {};
            int n_seeing = 0;
            int64_t used = 0;  // keys of the tile the group's rows use: [0, used)
            for (int r = 0; r < nr; ++r) {
              const Run& ru = run[size_t(i0 + r0 + r)];
              sees[r] = ru.lo < ru.hi && ru.lo < key0 + n && ru.hi > key0;
              if (sees[r]) {
                ++n_seeing;
                used = std::max(used, std::min(ru.hi - key0, n));
              }
            }
            if (n_seeing == 0) continue;
            kernels.attn_scores_tile(q.as<float>() + (i0 + r0) * q_cols + int64_t(h) * hd, size_t(q_cols), nr, ktile,
                                     hd, p.scale, s.data());
            for (int r = 0; r < nr; ++r) {
              if (!sees[r]) continue;
              const Run& ru = run[size_t(i0 + r0 + r)];
              const int64_t a = std::max(ru.lo, key0) - key0, e = std::min(ru.hi, key0 + n) - key0;
              const int64_t row = r0 + r;
              fold_tile(s.data() + r * kT, a, e, p.softcap, m[size_t(row)], l[size_t(row)], o.data() + row * hd, hd,
                        pr.data() + r * kT);
            }
            if (n_seeing == nr) {
              kernels.attn_values_tile(pr.data(), nr, vtile, used, hd, o.data() + r0 * hd, size_t(hd));
            } else {
              for (int r = 0; r < nr; ++r)
                if (sees[r])
                  kernels.attn_values_tile(pr.data() + r * kT, 1, vtile, used, hd, o.data() + (r0 + r) * hd, size_t(hd));
            }
          }
        }
        for (int64_t r = 0; r < nb; ++r) {
          float* dst = o_all + (i0 + r) * q_cols + int64_t(h) * hd;
          const float* src = o.data() + r * hd;
          if (l[size_t(r)] > 0) {
            const float inv = 1.f / l[size_t(r)];
            for (int c = 0; c < hd; ++c) dst[c] = src[c] * inv;
          } else {
            std::fill(dst, dst + hd, 0.f);
          }
        }
      }
  }
}

}  // namespace ragkv
