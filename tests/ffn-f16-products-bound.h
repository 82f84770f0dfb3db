// How far the CUDA prefill FFN with its gate/up products written in f16 (cuda/cuda-ffn.cpp,
// cuda/f16-product-bound.h) may lie from the same FFN with f32 products (the unfused ops, or
// RAGKV_CUDA_FFN_PRODUCTS=f32), derived from the one rounding it adds; and host mirrors of both
// paths' arithmetic that check the derivation where no GPU is (tests/test-f16-products.cpp). The
// GPU test (tests/test-cuda-ops.cpp) holds the kernels to the same bound.
//
// Both paths multiply the same f16 operand values (their row scales are powers of two, exact; only
// values near f16's subnormal range may round differently: 2^-25 · ux each, ux the row's unscale)
// by the same f16 weights, accumulating in f32. The f16 path rounds each product once more. With
// G, U the f32 path's products (after its epilogue), S_j = Σ_k |x_k w_jk| and L1_j = Σ_k |w_jk|:
//   |g_j − G_j| ≤ δg_j = 2^-11 |G_j| + (1 + 2^-11) (2 · in · 2^-23 · S_j (1 + 2^-10)
//                                                    + (2^-24 L1_j + 2^-25) · ux_max)
// (the product's rounding; both accumulations, in whatever order cuBLAS picks, 2^-23 a step for
// tensor cores that align by truncation; subnormal operands), δu_j alike. SiLU's and tanh-GELU's slopes are below 1.13 in magnitude, so
//   |a_j − A_j| ≤ δa_j = 1.13 δg_j |U_j| + |act(G_j)| δu_j + 1.13 δg_j δu_j + 2^-19 (|A_j| + 1e-30),
// the last term both sides' f32 evaluation of act(g) · u (a few ulps each). Both paths round a to
// the down GEMM's f16 operand (2^-11 of it, or 2^-25 · ua near subnormals, ua ≤ max(1, 2^-14 ·
// the row's largest |a|)) and accumulate p in f32:
//   |p_i − P_i| ≤ Σ_j (δa_j + 2^-11 (2|A_j| + δa_j) + 2^-24 ua) |d_ij|
//                + 2 · ff · 2^-23 · Σ_j (|A_j| + δa_j) (1 + 2^-10) |d_ij|.
// It is a worst case: a product read from the wrong column, a row scale not undone, gate and up
// exchanged or an overflow break it by orders of magnitude; beside it the normalised squared
// error must stay under 1e-5 (the expected one is about 2^-22).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/format/fp16.h"
#include "cuda/f16-product-bound.h"
#include "cuda/f16-row-scale.cuh"

namespace ragkv::test {

// An FFN's shapes and values as the device holds them: x [n][in]; gate and up weights [ff][in],
// down [in][ff] (f16 values, widened).
struct FfnProblem {
  int64_t n = 0, in = 0, ff = 0;
  bool gelu = false;
  std::vector<float> x, w_gate, w_up, w_down;
};

// The activations as glu-activations.cuh writes them (on the host: the mirrors compare the two
// paths with each other, not with the device).
inline float ffn_act(float g, bool gelu) {
  if (!gelu) return g / (1.f + std::exp(-g));
  const float t = -1.5957691216057308f * (g + 0.044715f * g * g * g);
  return g / (1.f + std::exp(std::min(std::max(t, -87.f), 87.f)));
}

inline float round_f16(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// A row as the operand conversion writes it (convert.cu): f16(x · s), and 1/s. top < 0: the
// default ceiling (65504); else 2^top (f16_product_top).
inline std::vector<float> ffn_operand(const float* row, int64_t cols, int top, float& unscale) {
  float largest = 0.f;
  for (int64_t k = 0; k < cols; ++k)
    if (std::fabs(row[k]) <= 3.4e38f) largest = std::max(largest, std::fabs(row[k]));
  float scale = 1.f;
  if (top < 0) f16_row_scale(largest, scale, unscale);
  else f16_row_scale(largest, scale, unscale, std::ldexp(1.f, top), top);
  std::vector<float> h(static_cast<size_t>(cols));
  for (int64_t k = 0; k < cols; ++k) h[size_t(k)] = round_f16(row[k] * scale);
  return h;
}

// What a mirror of the FFN leaves: the products G, U (after the epilogue's unscale) and p [n][in].
struct FfnResult {
  std::vector<float> g, u, p;
};

// A mirror of the device FFN: products_top < 0 keeps the products in f32 (the unfused ops, and
// the fused kernel under RAGKV_CUDA_FFN_PRODUCTS=f32), else rounds them to f16 with xn's rows
// scaled to the ceiling 2^products_top. Sequential f32 accumulation (the device's order differs;
// the bound allows for that).
inline FfnResult ffn_mirror(const FfnProblem& f, int products_top) {
  FfnResult r;
  r.g.resize(size_t(f.n * f.ff));
  r.u.resize(size_t(f.n * f.ff));
  r.p.resize(size_t(f.n * f.in));
  std::vector<float> a(size_t(f.ff));
  for (int64_t i = 0; i < f.n; ++i) {
    float ux = 1.f;
    const std::vector<float> xh = ffn_operand(&f.x[size_t(i * f.in)], f.in, products_top, ux);
    for (int64_t j = 0; j < f.ff; ++j) {
      float sg = 0.f, su = 0.f;
      for (int64_t k = 0; k < f.in; ++k) {
        sg += xh[size_t(k)] * f.w_gate[size_t(j * f.in + k)];
        su += xh[size_t(k)] * f.w_up[size_t(j * f.in + k)];
      }
      if (products_top >= 0) {
        sg = round_f16(sg);
        su = round_f16(su);
      }
      const float g = sg * ux, u = su * ux;
      r.g[size_t(i * f.ff + j)] = g;
      r.u[size_t(i * f.ff + j)] = u;
      a[size_t(j)] = ffn_act(g, f.gelu) * u;
    }
    float ua = 1.f;
    const std::vector<float> ah = ffn_operand(a.data(), f.ff, -1, ua);
    for (int64_t o = 0; o < f.in; ++o) {
      float s = 0.f;
      for (int64_t j = 0; j < f.ff; ++j) s += ah[size_t(j)] * f.w_down[size_t(o * f.ff + j)];
      r.p[size_t(i * f.in + o)] = s * ua;
    }
  }
  return r;
}

// The bound above on |p − P| for every output [n][in], from the f32 path's products G, U (the
// same layout as FfnResult's) and products_top, the exponent the f16 path scaled xn with.
inline std::vector<double> ffn_f16_products_bound(const FfnProblem& f, const std::vector<float>& G,
                                                  const std::vector<float>& U, int products_top) {
  const double e11 = std::ldexp(1.0, -11), e23 = std::ldexp(1.0, -23), e24 = std::ldexp(1.0, -24),
               e25 = std::ldexp(1.0, -25);
  const double kSlope = 1.13;
  std::vector<double> bound(size_t(f.n * f.in));
  std::vector<double> da(size_t(f.ff)), A(size_t(f.ff));
  for (int64_t i = 0; i < f.n; ++i) {
    const float* x = &f.x[size_t(i * f.in)];
    double largest_x = 0;
    for (int64_t k = 0; k < f.in; ++k)
      if (std::fabs(x[k]) <= 3.4e38f) largest_x = std::max(largest_x, double(std::fabs(x[k])));
    // Either path's unscale: at most the larger of 1, largest / 2^(top − 1) (bounded ceiling) and
    // largest / 2^14 (the default one).
    const double ux_max =
        std::max({1.0, largest_x / std::ldexp(1.0, std::max(products_top, 0) - 1), largest_x / 16384.0});
    double largest_a = 0;
    for (int64_t j = 0; j < f.ff; ++j) {
      double sg = 0, su = 0, lg = 0, lu = 0;
      for (int64_t k = 0; k < f.in; ++k) {
        const double wg = std::fabs(f.w_gate[size_t(j * f.in + k)]), wu = std::fabs(f.w_up[size_t(j * f.in + k)]);
        sg += std::fabs(x[k]) * wg;
        su += std::fabs(x[k]) * wu;
        lg += wg;
        lu += wu;
      }
      const double Gj = G[size_t(i * f.ff + j)], Uj = U[size_t(i * f.ff + j)];
      const auto delta = [&](double P, double S, double L1) {
        return e11 * std::fabs(P) + (1 + e11) * (2.0 * double(f.in) * e23 * S * (1 + 1.0 / 1024) +
                                                  (e24 * L1 + e25) * ux_max);
      };
      const double dg = delta(Gj, sg, lg), du = delta(Uj, su, lu);
      const double act_g = std::fabs(double(ffn_act(float(Gj), f.gelu)));
      A[size_t(j)] = std::fabs(double(ffn_act(float(Gj), f.gelu)) * Uj);
      da[size_t(j)] = kSlope * dg * std::fabs(Uj) + act_g * du + kSlope * dg * du +
                      std::ldexp(1.0, -19) * (A[size_t(j)] + 1e-30);
      largest_a = std::max(largest_a, A[size_t(j)] + da[size_t(j)]);
    }
    const double ua = std::max(1.0, largest_a / 16384.0);
    for (int64_t o = 0; o < f.in; ++o) {
      double b = 0, acc = 0;
      for (int64_t j = 0; j < f.ff; ++j) {
        const double d = std::fabs(f.w_down[size_t(o * f.ff + j)]);
        b += (da[size_t(j)] + e11 * (2 * A[size_t(j)] + da[size_t(j)]) + e24 * ua) * d;
        acc += (A[size_t(j)] + da[size_t(j)]) * d;
      }
      bound[size_t(i * f.in + o)] = b + 2.0 * double(f.ff) * e23 * acc * (1 + 1.0 / 1024);
    }
  }
  return bound;
}

// How a result p compares with the f32 path's P under the bound: the outputs past it (a
// non-finite one counts), and the normalised squared error Σ (p − P)² / Σ P².
struct FfnComparison {
  int64_t past_bound = 0;
  double nse = 0;
  bool ok() const { return past_bound == 0 && nse <= 1e-5; }
};

inline FfnComparison compare_ffn(const std::vector<float>& p, const std::vector<float>& P,
                                 const std::vector<double>& bound) {
  FfnComparison c;
  double num = 0, den = 0;
  for (size_t i = 0; i < P.size(); ++i) {
    const double d = double(p[i]) - double(P[i]);
    if (!(std::fabs(d) <= bound[i])) ++c.past_bound;
    num += d * d;
    den += double(P[i]) * double(P[i]);
  }
  c.nse = den > 0 ? num / den : num;
  if (!std::isfinite(c.nse)) c.nse = INFINITY;
  return c;
}

}  // namespace ragkv::test
