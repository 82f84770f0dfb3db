// Tests of core/format/quantize (the round-to-nearest encoders): each type's rows, quantised and read
// back by core/format/quant's dequantiser (itself checked against gguf-py, tests/test-quant.cpp), stay
// within the type's stated error bound of every element, and the error is as small on average as
// the codes allow. The bounds, per block (legacy types) or super-block (K-quants), with
// amax = max|x| and, for types with a min, R = max(x) − min(x) (K-quants: the range including 0):
//   Q8_0  0.5 · amax/127          rounding to the nearest code
//   Q4_0  1.0 · amax/8            d = m/−8 puts the extreme m on code −8; −m needs code +8, clamped to 7
//   Q5_0  1.0 · amax/16           likewise with 16 levels each side
//   Q4_1  0.5 · R/15,  Q5_1  0.5 · R/31
//   Q4_K  0.51 · R/15, Q5_K  0.51 · R/31   rounding with the sub-block's 6-bit-rounded step (at most
//         d/2 = R/(15·126) coarser) and a top element clamped by at most 7.5·d + dmin/2 < 0.25 · R/15
//   Q6_K  0.51 · amax/31          likewise with 8-bit sub-block scales
// plus amax/1024 for the f16 rounding of d and of the min. F16 and BF16 are checked to round to
// nearest (a relative error of 2^-11 and 2^-8).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/format/quant.h"
#include "core/format/quantize.h"
#include "core/util/error.h"

using namespace ragkv;

namespace {

struct Bound {
  GgmlType type;
  double factor;      // of the step below
  bool with_min;      // step from the range (true) or from max|x| (false)
  double levels;      // step = (R or amax) / levels
  double rms_ratio;   // RMS error / RMS value on N(0,1) rows stays below this
};

// The stated bounds (header comment) and the RMS error expected on Gaussian rows: the rounding
// noise of a uniform step is step/√12 ≈ 0.29 · step, here with a margin.
const std::vector<Bound> kBounds = {
    {GgmlType::Q8_0, 0.5, false, 127, 0.007}, {GgmlType::Q4_0, 1.0, false, 8, 0.11},
    {GgmlType::Q5_0, 1.0, false, 16, 0.055},  {GgmlType::Q4_1, 0.5, true, 15, 0.11},
    {GgmlType::Q5_1, 0.5, true, 31, 0.055},   {GgmlType::Q4_K, 0.51, true, 15, 0.11},
    {GgmlType::Q5_K, 0.51, true, 31, 0.055},  {GgmlType::Q6_K, 0.51, false, 31, 0.03},
};

std::vector<float> round_trip(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(ggml_row_bytes(t, int64_t(x.size())));
  quantize_row(t, x.data(), q.data(), int64_t(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), int64_t(x.size()));
  return y;
}

// Every element within the bound of its (super-)block; returns the worst error / bound.
double check_bound(const Bound& b, const std::vector<float>& x, const std::vector<float>& y) {
  const int64_t be = ggml_block_elems(b.type);
  const bool k_quant = be == 256;
  double worst = 0;
  for (size_t i0 = 0; i0 < x.size(); i0 += size_t(be)) {
    double amax = 0, lo = k_quant ? 0 : 1e30, hi = k_quant ? 0 : -1e30;
    for (size_t i = i0; i < i0 + size_t(be); ++i) {
      amax = std::max(amax, std::fabs(double(x[i])));
      lo = std::min(lo, double(x[i]));
      hi = std::max(hi, double(x[i]));
    }
    const double step = (b.with_min ? hi - lo : amax) / b.levels;
    const double bound = b.factor * step + amax / 1024 + 1e-30;
    for (size_t i = i0; i < i0 + size_t(be); ++i) {
      const double err = std::fabs(double(x[i]) - double(y[i]));
      if (err > bound) {
        FAIL_CHECK("element " << i << ": " << x[i] << " read back as " << y[i] << ", error " << err << " > bound "
                              << bound);
        return err / bound;
      }
      worst = std::max(worst, err / bound);
    }
  }
  return worst;
}

double rms_ratio(const std::vector<float>& x, const std::vector<float>& y) {
  double e = 0, s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    s += double(x[i]) * x[i];
  }
  return std::sqrt(e / s);
}

}  // namespace

TEST_CASE("quantize: every type read back by the dequantiser within its stated bound (rows of random values)") {
  std::mt19937 rng(7);
  for (const Bound& b : kBounds) {
    CAPTURE(ggml_type_name(b.type));
    const int64_t be = ggml_block_elems(b.type);
    // Odd block counts, one block, and a row of Llama-3-8B's ffn width (14336).
    for (int64_t n : {be, 3 * be, int64_t(14336)}) {
      CAPTURE(n);
      struct Dist {
        const char* name;
        std::function<float()> draw;
      };
      std::normal_distribution<float> normal(0.f, 1.f), weights(0.f, 1.f / std::sqrt(14336.f));
      std::normal_distribution<float> shifted(3.f, 1.f);
      std::uniform_real_distribution<float> negative(-5.f, -1.f);
      std::exponential_distribution<float> skewed(1.f);
      const std::vector<Dist> dists = {
          {"N(0,1)", [&] { return normal(rng); }},
          {"N(0,1/14336): weight-sized, subnormal f16 scales", [&] { return weights(rng); }},
          {"N(3,1): all positive", [&] { return shifted(rng); }},
          {"U(-5,-1): all negative", [&] { return negative(rng); }},
          {"Exp(1): skewed", [&] { return skewed(rng); }},
      };
      for (const Dist& d : dists) {
        CAPTURE(d.name);
        std::vector<float> x(static_cast<size_t>(n));
        for (float& v : x) v = d.draw();
        const auto y = round_trip(b.type, x);
        CHECK(check_bound(b, x, y) <= 1.0);
        if (std::string(d.name) == "N(0,1)") CHECK(rms_ratio(x, y) < b.rms_ratio);
      }
      // An outlier in every block: the other elements lose precision but stay within the bound.
      std::vector<float> x(static_cast<size_t>(n));
      for (float& v : x) v = normal(rng);
      for (int64_t i = 0; i < n; i += be) x[size_t(i + 5)] = 40.f;
      CHECK(check_bound(b, x, round_trip(b.type, x)) <= 1.0);
    }
  }
}

TEST_CASE("quantize: zero and constant blocks read back exactly or within the bound") {
  for (const Bound& b : kBounds) {
    CAPTURE(ggml_type_name(b.type));
    const int64_t be = ggml_block_elems(b.type);
    const std::vector<float> zeros(static_cast<size_t>(2 * be), 0.f);
    CHECK(round_trip(b.type, zeros) == zeros);
    const std::vector<float> ones(static_cast<size_t>(2 * be), 0.75f);
    CHECK(check_bound(b, ones, round_trip(b.type, ones)) <= 1.0);
  }
}

TEST_CASE("quantize: f16 and bf16 round to nearest") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.f, 10.f);
  std::vector<float> x(1000);
  for (float& v : x) v = normal(rng);
  const auto h = round_trip(GgmlType::F16, x);
  const auto bh = round_trip(GgmlType::BF16, x);
  const auto f = round_trip(GgmlType::F32, x);
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(std::fabs(h[i] - x[i]) <= std::fabs(x[i]) * 0x1p-11f);
    CHECK(std::fabs(bh[i] - x[i]) <= std::fabs(x[i]) * 0x1p-8f);
    CHECK(f[i] == x[i]);
  }
}

TEST_CASE("quantize: types it cannot write and rows of partial blocks are refused by name") {
  CHECK(ggml_type_quantizable(GgmlType::Q4_K));
  CHECK_FALSE(ggml_type_quantizable(GgmlType::Q2_K));
  CHECK_FALSE(ggml_type_quantizable(GgmlType::IQ2_XS));
  std::vector<float> x(512, 1.f);
  std::vector<uint8_t> out(4096);
  CHECK_THROWS_WITH_AS(quantize_row(GgmlType::Q2_K, x.data(), out.data(), 256), doctest::Contains("Q2_K"), Error);
  CHECK_THROWS_WITH_AS(quantize_row(GgmlType::Q4_K, x.data(), out.data(), 100), doctest::Contains("256-element blocks"),
                       Error);
}
