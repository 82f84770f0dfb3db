// The CUDA prefill FFN's gate/up products written in f16 (cuda/f16-product-bound.h), checked on the
// host: the operand ceiling that keeps every product inside f16, the row scaling that meets it
// (cuda/f16-row-scale.cuh, the kernels' own function), the weight's row sums, and the derived
// bound of tests/ffn-f16-products-bound.h on mirrors of both paths — which a dropped row scale,
// gate and up exchanged, products read a column off or an unbounded f16 product must break.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cuda/f16-product-bound.h"
#include "cuda/f16-row-scale.cuh"
#include "tests/ffn-f16-products-bound.h"

namespace {

using ragkv::f16_product_top;
using ragkv::f16_row_scale;
using ragkv::test::FfnProblem;

// A value's exponent p with 2^(p−1) ≤ v < 2^p.
int exponent_of(float v) {
  int p = 0;
  (void)std::frexp(v, &p);
  return p;
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> f16_values(size_t n, uint32_t seed, float range) {
  std::vector<float> v = uniform(n, seed, -range, range);
  for (float& x : v) x = ragkv::test::round_f16(x);
  return v;
}

FfnProblem make_problem(int64_t n, int64_t in, int64_t ff, bool gelu, uint32_t seed) {
  FfnProblem f;
  f.n = n;
  f.in = in;
  f.ff = ff;
  f.gelu = gelu;
  f.x = uniform(size_t(n * in), seed, -2.f, 2.f);
  for (int64_t k = 0; k < in; ++k) f.x[size_t(k)] *= 3e4f;  // row 0: products far past 65504 unscaled
  f.x[size_t(in + 1)] = 1e-6f;  // row 1 holds a value in f16's subnormal range
  f.w_gate = f16_values(size_t(ff * in), seed + 1, 1.f);
  f.w_up = f16_values(size_t(ff * in), seed + 2, 1.f);
  f.w_down = f16_values(size_t(in * ff), seed + 3, 1.f);
  return f;
}

int top_for(const FfnProblem& f) {
  return f16_product_top(float(std::max(ragkv::max_row_abs_sum(f.w_gate.data(), f.ff, f.in),
                                        ragkv::max_row_abs_sum(f.w_up.data(), f.ff, f.in))));
}

}  // namespace

TEST_CASE("f16 products: the operand ceiling bounds every product by 2^15, as high as it may be") {
  CHECK(f16_product_top(0.f) == 15);
  CHECK(f16_product_top(1.f) == 15);
  CHECK(f16_product_top(1.5f) == 14);
  CHECK(f16_product_top(2.f) == 14);
  CHECK(f16_product_top(128.f) == 8);
  CHECK(f16_product_top(129.f) == 7);
  CHECK(f16_product_top(32768.f) == 0);
  CHECK(f16_product_top(32769.f) == -1);
  CHECK(f16_product_top(INFINITY) == -1);
  CHECK(f16_product_top(NAN) == -1);
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> log_l1(-3, 6);
  for (int i = 0; i < 10000; ++i) {
    const auto l1 = float(std::pow(10.0, log_l1(rng)));
    const int e = f16_product_top(l1);
    CAPTURE(l1);
    if (l1 > 32768.f) {
      CHECK(e == -1);
      continue;
    }
    REQUIRE(e >= 0);
    REQUIRE(e <= 15);
    CHECK(std::ldexp(double(l1), e) <= 32768.0);
    if (e < 15) CHECK(std::ldexp(double(l1), e + 1) > 32768.0);
  }
}

TEST_CASE("f16 products: rows are scaled under the ceiling by powers of two, the default rule unchanged") {
  float s = 0, u = 0;
  // The default: only rows above 65504 or below 2^-10, into [2^14, 2^15).
  for (const float largest : {0.f, 1.f, 1.f / 1024, 65504.f}) {
    f16_row_scale(largest, s, u);
    CHECK(s == 1.f);
    CHECK(u == 1.f);
  }
  for (const float largest : {65505.f, 3e9f, 1e-4f, 1e-30f}) {
    CAPTURE(largest);
    f16_row_scale(largest, s, u);
    CHECK(largest * s >= 16384.f);
    CHECK(largest * s < 32768.f);
    CHECK(s * u == 1.f);
    CHECK(exponent_of(s) + exponent_of(u) == 2);  // both powers of two
  }
  // A ceiling 2^top: every scaled row's largest lands in [2^(top−1), 2^top), none above 2^top.
  for (int top = 0; top <= 15; ++top) {
    const float ceiling = std::ldexp(1.f, top);
    for (const float largest : {0.f, 1e-6f, 1e-3f, 0.75f, 1.f, 3.f, 100.f, 3e4f, 65504.f, 1e7f, ceiling,
                                std::nextafter(ceiling, INFINITY)}) {
      CAPTURE(top);
      CAPTURE(largest);
      f16_row_scale(largest, s, u, ceiling, top);
      CHECK(largest * s <= ceiling);
      CHECK(s * u == 1.f);
      const bool scaled = largest > ceiling || (largest > 0.f && largest < 1.f / 1024);
      CHECK((s != 1.f) == scaled);
      if (scaled) CHECK(largest * s >= ceiling / 2);
    }
  }
}

TEST_CASE("f16 products: a weight's row sums are bounded from above, tightly") {
  for (const int64_t cols : {1, 7, 8, 9, 576, 4099}) {
    CAPTURE(cols);
    const int64_t rows = 5;
    const std::vector<float> w = uniform(size_t(rows * cols), uint32_t(cols), -3.f, 3.f);
    double exact = 0;
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t k = 0; k < cols; ++k) s += std::fabs(double(w[size_t(r * cols + k)]));
      exact = std::max(exact, s);
    }
    const double bound = ragkv::max_row_abs_sum(w.data(), rows, cols);
    CHECK(bound >= exact);
    CHECK(bound <= exact * (1 + 1.0 / 512));
  }
}

TEST_CASE("f16 products: the FFN with f16 products stays within its derived bound of f32 products") {
  struct Case {
    int64_t n, in, ff;
  };
  const Case cases[] = {{5, 64, 96}, {3, 256, 768}, {4, 96, 200}};
  uint32_t seed = 900;
  for (const Case& c : cases)
    for (const bool gelu : {false, true}) {
      CAPTURE(c.in);
      CAPTURE(c.ff);
      CAPTURE(gelu);
      const FfnProblem f = make_problem(c.n, c.in, c.ff, gelu, seed += 10);
      const int top = top_for(f);
      REQUIRE(top >= 0);
      REQUIRE(top < 15);  // row 0 is scaled for its products, not only for f16's range
      const ragkv::test::FfnResult ref = ragkv::test::ffn_mirror(f, -1);
      const std::vector<double> bound = ragkv::test::ffn_f16_products_bound(f, ref.g, ref.u, top);
      const ragkv::test::FfnResult got = ragkv::test::ffn_mirror(f, top);
      const ragkv::test::FfnComparison ok = ragkv::test::compare_ffn(got.p, ref.p, bound);
      CAPTURE(ok.nse);
      CHECK(ok.past_bound == 0);
      CHECK(ok.ok());
      CHECK(got.p != ref.p);  // the products' rounding shows

      // What the check must catch. (a) xn's row scale not undone on the products: row 0 is scaled.
      ragkv::test::FfnResult broken = ragkv::test::ffn_mirror(f, top);
      {
        float ux = 1.f;
        (void)ragkv::test::ffn_operand(f.x.data(), f.in, top, ux);
        REQUIRE(ux != 1.f);
        FfnProblem g = f;  // the mirror of a kernel that forgets ux: the same as x's row 0 unscaled
        for (int64_t k = 0; k < f.in; ++k) g.x[size_t(k)] /= ux;
        const ragkv::test::FfnResult wrong = ragkv::test::ffn_mirror(g, top);
        std::copy(wrong.p.begin(), wrong.p.begin() + f.in, broken.p.begin());
        CHECK_FALSE(ragkv::test::compare_ffn(broken.p, ref.p, bound).ok());
      }
      // (b) gate and up exchanged.
      {
        FfnProblem g = f;
        std::swap(g.w_gate, g.w_up);
        CHECK_FALSE(ragkv::test::compare_ffn(ragkv::test::ffn_mirror(g, top).p, ref.p, bound).ok());
      }
      // (c) every product read one column off (its neighbour's gate row).
      {
        FfnProblem g = f;
        for (int64_t j = 0; j < f.ff; ++j)
          for (int64_t k = 0; k < f.in; ++k)
            g.w_gate[size_t(j * f.in + k)] = f.w_gate[size_t(((j + 1) % f.ff) * f.in + k)];
        CHECK_FALSE(ragkv::test::compare_ffn(ragkv::test::ffn_mirror(g, top).p, ref.p, bound).ok());
      }
      // (d) products in f16 under the ceiling 2^15 (f16_product_top's for row sums of at most 1):
      // row 0's products overflow.
      CHECK_FALSE(ragkv::test::compare_ffn(ragkv::test::ffn_mirror(f, 15).p, ref.p, bound).ok());
    }
}
