// When a GEMM's products may be written in f16 (issue 40 item 1: 16-bit activations between ops):
// the operand rows are scaled so that no product can overflow. A row x̂ (its largest |x̂| ≤ 2^e,
// convert.cuh) times weight row j gives |x̂ · w_j| ≤ 2^e · Σ_k |w_jk| ≤ 2^e · max_row_l1, the
// largest absolute row sum of the weight (CudaWeight::max_row_l1, summed on the host at load).
// With 2^e · max_row_l1 ≤ 2^15 (65504, f16's largest finite value, is almost twice that), the f32
// accumulation's own error (at most in_features · 2^-23 relative: tensor cores align by truncation)
// and the rounding of the weight to f16 (2^-11 relative) cannot carry a product past 65504. Powers of two scale exactly, so the scaled operand holds the
// same f16 values as the default scaling (only values 2^-14 below the smallest normal of their row
// scale become subnormal, an absolute 2^-25 · 2^-e of the row's largest), and the product's only
// new error is its rounding to f16: 2^-11 of its magnitude (absolute 2^-25 · 2^-e below f16's
// normal range). Plain C++: the CUDA backend and tests/test-f16-products.cpp use it.
#pragma once
#include <cmath>

namespace ragkv {

// The bound on products written in f16: 2^15.
inline constexpr float kF16ProductLimit = 32768.f;

// The exponent e (0 ≤ e ≤ 15) of the operand ceiling 2^e for products in f16 by a weight whose
// absolute row sums are at most max_row_l1: the largest e with 2^e · max_row_l1 ≤ 2^15 (15 for
// max_row_l1 ≤ 1), or −1 — products kept in f32 — when even e = 0 does not bound them
// (max_row_l1 > 2^15) or max_row_l1 is not finite (unknown, or not computed).
inline int f16_product_top(float max_row_l1) {
  if (!(max_row_l1 <= kF16ProductLimit)) return -1;  // also NaN
  if (max_row_l1 <= 1.f) return 15;
  int p = 0;
  (void)std::frexp(max_row_l1, &p);  // 2^(p−1) ≤ max_row_l1 < 2^p, 1 ≤ p ≤ 16
  // 2^e · max_row_l1 < 2^(e+p) ≤ 2^15 for e = 15 − p; e = 16 − p also fits when max_row_l1 = 2^(p−1).
  return max_row_l1 == std::ldexp(1.f, p - 1) ? 16 - p : 15 - p;
}

// An upper bound on the largest absolute row sum Σ_k |w_jk| over the rows of a row-major
// [rows][cols] block of values: each row summed in eight f32 lanes (the compiler vectorises them;
// a weight load sums billions of values), then raised by 2^-10 of itself, more than the f32 sums'
// rounding (at most cols/8 · 2^-24 relative: below 2^-11 for rows of up to 2^16 values; past
// that, the factor of almost two between kF16ProductLimit and 65504 still covers it) can take away.
inline double max_row_abs_sum(const float* w, long long rows, long long cols) {
  double largest = 0;
  for (long long r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    long long k = 0;
    for (; k + 8 <= cols; k += 8)
      for (int j = 0; j < 8; ++j) lane[j] += std::fabs(row[k + j]);
    double s = 0;
    for (; k < cols; ++k) s += std::fabs(double(row[k]));
    for (int j = 0; j < 8; ++j) s += double(lane[j]);
    largest = s > largest ? s : largest;
  }
  return largest * (1 + 1.0 / 1024);
}

}  // namespace ragkv
