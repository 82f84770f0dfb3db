// The CPU backend's quantised product kernels (core/backend/quant-kernels.h) on random blocks of every
// weight type they serve, odd row counts (the AVX2 table's 4-row register tiles leave tails) and
// several block counts: each product against dequantise-then-f32 in double precision, the
// portable table against the AVX2 one, each output row independent of the other rows of the call,
// and the backend's matmul on quantised and stacked weights against the same reference.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/backend/cpu-weight.h"
#include "core/backend/quant-kernels.h"
#include "core/format/fp16.h"
#include "core/format/gguf.h"
#include "core/format/quant.h"
#include "tests/test-ops-util.h"

using namespace ragkv;

namespace {

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::F16,  GgmlType::BF16};

void put_f16(uint8_t* p, float v) {
  const f16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// w · x over k values in double, and Σ |w_c · x_c| (what a relative tolerance is taken of).
struct DotRef {
  double value, magnitude;
};
DotRef dot_ref(const float* w, const float* x, int64_t k) {
  DotRef r{0, 0};
  for (int64_t c = 0; c < k; ++c) {
    r.value += double(w[c]) * x[c];
    r.magnitude += std::fabs(double(w[c]) * x[c]);
  }
  return r;
}

// `rows` random rows of k values of type t: random quant bytes, with every f16 scale, min and
// value field set to a finite value of a realistic size (the block layouts of core/format/quant.cpp).
std::vector<uint8_t> random_rows(GgmlType t, int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t row_bytes = ggml_row_bytes(t, k);
  std::vector<uint8_t> data(row_bytes * size_t(rows));
  if (t == GgmlType::F16 || t == GgmlType::BF16) {
    for (size_t i = 0; i < data.size(); i += 2) {
      const float v = u(rng);
      if (t == GgmlType::F16) {
        put_f16(&data[i], v);
      } else {
        const bf16_t h = fp32_to_bf16(v);
        std::memcpy(&data[i], &h, 2);
      }
    }
    return data;
  }
  for (auto& b : data) b = uint8_t(byte(rng));
  const size_t bb = ggml_block_bytes(t);
  for (size_t off = 0; off < data.size(); off += bb) {
    uint8_t* b = &data[off];
    switch (t) {
      case GgmlType::Q4_0:
      case GgmlType::Q5_0: put_f16(b, 0.02f * u(rng)); break;
      case GgmlType::Q8_0: put_f16(b, 0.002f * u(rng)); break;
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
        put_f16(b, 0.01f * u(rng));
        put_f16(b + 2, 0.1f * u(rng));
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put_f16(b, 0.002f * u(rng));
        put_f16(b + 2, 0.002f * u(rng));
        break;
      case GgmlType::Q6_K: put_f16(b + 208, 0.0005f * u(rng)); break;
      default: FAIL("no random blocks for ", ggml_type_name(t));
    }
  }
  return data;
}

// The activations as the kernels of weight type t read them (with wide: its wide-activation
// kernels), and as f32 values (the quantised blocks dequantised: d · q), for m rows of k values.
struct Acts {
  std::vector<uint8_t> bytes;
  size_t stride = 0;
  std::vector<float> values;  // [m][k], what the kernels multiply
};

Acts make_acts(const QuantKernels& qk, GgmlType t, const std::vector<float>& x, int64_t m, int64_t k,
               bool wide = false) {
  Acts a;
  const ActFormat f = wide ? wide_act_format(t) : act_format(t);
  a.stride = act_row_bytes(f, k);
  a.bytes.resize(a.stride * size_t(m));
  a.values.resize(size_t(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x.data() + i * k;
    float* vi = a.values.data() + i * k;
    uint8_t* bi = a.bytes.data() + size_t(i) * a.stride;
    if (f == ActFormat::q8_32) {
      auto* blocks = reinterpret_cast<ActBlock32*>(bi);
      qk.quantize_act32(xi, blocks, k);
      for (int64_t c = 0; c < k; ++c) vi[c] = blocks[c / 32].d * float(blocks[c / 32].q[c % 32]);
    } else if (f == ActFormat::q8_256) {
      auto* blocks = reinterpret_cast<ActBlock256*>(bi);
      qk.quantize_act256(xi, blocks, k);
      for (int64_t c = 0; c < k; ++c) vi[c] = blocks[c / 256].d * float(blocks[c / 256].q[c % 256]);
    } else if (f == ActFormat::q16_32) {
      auto* blocks = reinterpret_cast<ActBlock32W*>(bi);
      qk.quantize_act32_wide(xi, blocks, k);
      for (int64_t c = 0; c < k; ++c) vi[c] = blocks[c / 32].d * float(blocks[c / 32].q[c % 32]);
    } else {
      std::memcpy(bi, xi, size_t(k) * sizeof(float));
      std::copy(xi, xi + k, vi);
    }
  }
  return a;
}

struct Case {
  int64_t m, n, blocks;
};
const Case kCases[] = {{1, 1, 1}, {1, 7, 3}, {2, 5, 2}, {3, 9, 1}, {4, 4, 5}, {5, 3, 2}, {7, 13, 3}, {9, 6, 4}};

// k for a case: `blocks` blocks of the type (F16/BF16: an odd k, so the SIMD loop has a tail).
int64_t k_of(GgmlType t, const Case& c) {
  const int64_t be = ggml_block_elems(t);
  return be == 1 ? 32 * c.blocks + 5 : be * c.blocks;
}

std::vector<const QuantKernels*> tables() {
  std::vector<const QuantKernels*> t = {&quant_kernels_scalar()};
  if (const QuantKernels* avx2 = quant_kernels_avx2()) t.push_back(avx2);
  return t;
}

}  // namespace

TEST_CASE("quant kernels: every type's product equals dequantise-then-f32 on random blocks (odd sizes, tails)") {
  for (const QuantKernels* qk : tables()) {
    for (GgmlType t : kTypes) {
      for (const Case& c : kCases) {
        const int64_t k = k_of(t, c);
        CAPTURE(qk->name);
        CAPTURE(ggml_type_name(t));
        CAPTURE(c.m);
        CAPTURE(c.n);
        CAPTURE(k);
        const std::vector<uint8_t> w = random_rows(t, c.n, k, uint32_t(k * 31 + c.n));
        const size_t row_bytes = ggml_row_bytes(t, k);
        std::vector<float> wf(size_t(c.n * k));
        for (int64_t j = 0; j < c.n; ++j) dequantize_row(t, w.data() + j * row_bytes, wf.data() + j * k, k);
        const std::vector<float> x = test::random_vec(size_t(c.m * k), uint64_t(c.m * 7 + k), 2.f);
        const Acts a = make_acts(*qk, t, x, c.m, k);
        std::vector<float> y(size_t(c.m * c.n), -1.f);
        gemm_for(*qk, t)(c.m, c.n, k, a.bytes.data(), a.stride, w.data(), row_bytes, y.data(), c.n);
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < c.n; ++j) {
            double exact = 0, mag = 0, unrounded = 0, rounding = 0;
            for (int64_t p = 0; p < k; ++p) {
              const double wv = wf[j * k + p], av = a.values[i * k + p], xv = x[i * k + p];
              exact += wv * av;
              mag += std::fabs(wv * av);
              unrounded += wv * xv;
              rounding += std::fabs(wv) * std::fabs(av - xv);
            }
            // The kernels' integer sums are exact; only f32 scaling and adding round.
            CHECK(std::fabs(y[i * c.n + j] - exact) <= 1e-5 * mag + 1e-6);
            // Each activation moved at most half a step of its block's scale when quantised.
            for (int64_t p = 0; p < k; ++p) {
              const ActFormat f = act_format(t);
              if (f == ActFormat::f32) continue;
              const int64_t bs = f == ActFormat::q8_32 ? 32 : 256;
              float amax = 0;
              for (int64_t q = p / bs * bs; q < p / bs * bs + bs; ++q) amax = std::max(amax, std::fabs(x[i * k + q]));
              REQUIRE(std::fabs(a.values[i * k + p] - x[i * k + p]) <= 0.5001 * amax / 127 + 1e-7);
            }
            CHECK(std::fabs(y[i * c.n + j] - unrounded) <= rounding + 1e-5 * mag + 1e-6);
          }
      }
    }
  }
}

TEST_CASE("quant kernels: the portable table equals the AVX2 table (activation bytes exactly, products to f32 rounding)") {
  const QuantKernels* avx2 = quant_kernels_avx2();
  if (!avx2) {
    MESSAGE("this CPU has no AVX2/FMA/F16C: only the portable table runs here");
    CHECK(std::string(quant_kernels().name) == "scalar");
    return;
  }
  const QuantKernels& sc = quant_kernels_scalar();
  // Activation blocks: bit-identical, including all-zero blocks and values on rounding ties.
  for (const int64_t k : {int64_t(256), int64_t(768)}) {
    std::vector<float> x = test::random_vec(size_t(k), uint64_t(k), 3.f);
    std::fill(x.begin() + 32, x.begin() + 64, 0.f);  // an all-zero 32-block
    x[70] = 127.f, x[71] = 0.5f, x[72] = -1.5f, x[73] = 2.5f;  // id = 1 in block 2: exact ties
    for (int i = 74; i < 96; ++i) x[i] = float(i - 85) + 0.5f;
    std::vector<ActBlock32> s32(size_t(k / 32)), v32(size_t(k / 32));
    std::vector<ActBlock256> s256(size_t(k / 256)), v256(size_t(k / 256));
    sc.quantize_act32(x.data(), s32.data(), k);
    avx2->quantize_act32(x.data(), v32.data(), k);
    sc.quantize_act256(x.data(), s256.data(), k);
    avx2->quantize_act256(x.data(), v256.data(), k);
    CHECK(std::memcmp(s32.data(), v32.data(), s32.size() * sizeof(ActBlock32)) == 0);
    CHECK(std::memcmp(s256.data(), v256.data(), s256.size() * sizeof(ActBlock256)) == 0);
    std::vector<ActBlock32W> s16(size_t(k / 32)), v16(size_t(k / 32));
    sc.quantize_act32_wide(x.data(), s16.data(), k);
    avx2->quantize_act32_wide(x.data(), v16.data(), k);
    CHECK(std::memcmp(s16.data(), v16.data(), s16.size() * sizeof(ActBlock32W)) == 0);
    CHECK(s16[1].d == 0.f);  // the all-zero block
    CHECK(s16[2].q[6] == 32767);
    CHECK(s32[2].q[6] == 127);
    CHECK(s32[2].q[7] == 0);   // 0.5 → 0 (ties to even)
    CHECK(s32[2].q[8] == -2);  // −1.5 → −2
    CHECK(s32[2].q[9] == 2);   // 2.5 → 2
  }
  for (GgmlType t : kTypes)
    for (const Case& c : kCases) {
      const int64_t k = k_of(t, c);
      CAPTURE(ggml_type_name(t));
      CAPTURE(c.m);
      CAPTURE(k);
      const std::vector<uint8_t> w = random_rows(t, c.n, k, uint32_t(k + c.n));
      const size_t row_bytes = ggml_row_bytes(t, k);
      const std::vector<float> x = test::random_vec(size_t(c.m * k), uint64_t(c.m + k), 2.f);
      const Acts as = make_acts(sc, t, x, c.m, k), av = make_acts(*avx2, t, x, c.m, k);
      REQUIRE(as.bytes == av.bytes);
      std::vector<float> ys(size_t(c.m * c.n)), yv(size_t(c.m * c.n));
      gemm_for(sc, t)(c.m, c.n, k, as.bytes.data(), as.stride, w.data(), row_bytes, ys.data(), c.n);
      gemm_for(*avx2, t)(c.m, c.n, k, av.bytes.data(), av.stride, w.data(), row_bytes, yv.data(), c.n);
      for (size_t i = 0; i < ys.size(); ++i) CHECK(std::fabs(ys[i] - yv[i]) <= 2e-5 * (std::fabs(ys[i]) + 1.f));
    }
  // Decode attention rows over f16 K/V, for one to five heads sharing the rows: the tables agree,
  // and each head of a call has the bits of that head alone.
  for (const int dim : {64, 37})
    for (const int nq : {1, 3, 5}) {
      CAPTURE(dim);
      CAPTURE(nq);
      const int64_t n = 11;
      const size_t stride = size_t(dim) + 3;
      std::vector<float> q = test::random_vec(size_t(nq * dim), 5), kf = test::random_vec(stride * n, 6),
                         p = test::random_vec(size_t(nq * n), 7);
      std::vector<uint16_t> kh(kf.size());
      for (size_t i = 0; i < kf.size(); ++i) kh[i] = fp32_to_fp16(kf[i]);
      std::vector<float> ss(size_t(nq * n)), sv(size_t(nq * n)), os(size_t(nq * dim), 0.5f), ov(size_t(nq * dim), 0.5f);
      sc.dot_f16_rows(q.data(), nq, kh.data(), stride, n, dim, 0.125f, ss.data());
      avx2->dot_f16_rows(q.data(), nq, kh.data(), stride, n, dim, 0.125f, sv.data());
      sc.axpy_f16_rows(p.data(), nq, kh.data(), stride, n, dim, os.data());
      avx2->axpy_f16_rows(p.data(), nq, kh.data(), stride, n, dim, ov.data());
      for (size_t i = 0; i < ss.size(); ++i) CHECK(std::fabs(ss[i] - sv[i]) <= 1e-5);
      for (size_t i = 0; i < os.size(); ++i) CHECK(std::fabs(os[i] - ov[i]) <= 1e-5);
      for (const QuantKernels* t : {&sc, avx2})
        for (int h = 0; h < nq; ++h) {
          std::vector<float> s1(static_cast<size_t>(n)), o1(static_cast<size_t>(dim), 0.5f);
          t->dot_f16_rows(q.data() + h * dim, 1, kh.data(), stride, n, dim, 0.125f, s1.data());
          t->axpy_f16_rows(p.data() + h * n, 1, kh.data(), stride, n, dim, o1.data());
          const std::vector<float>& sg = t == &sc ? ss : sv;
          const std::vector<float>& og = t == &sc ? os : ov;
          CHECK(std::memcmp(s1.data(), sg.data() + h * n, size_t(n) * sizeof(float)) == 0);
          CHECK(std::memcmp(o1.data(), og.data() + h * dim, size_t(dim) * sizeof(float)) == 0);
        }
    }
}

TEST_CASE("quant kernels: an output row depends only on its own activation row (batched decode equals one at a time)") {
  for (const QuantKernels* qk : tables())
    for (GgmlType t : kTypes) {
      CAPTURE(qk->name);
      CAPTURE(ggml_type_name(t));
      const int64_t m = 7, n = 5, k = ggml_block_elems(t) == 1 ? 101 : ggml_block_elems(t) * 2;
      const std::vector<uint8_t> w = random_rows(t, n, k, 99);
      const size_t row_bytes = ggml_row_bytes(t, k);
      const std::vector<float> x = test::random_vec(size_t(m * k), 42);
      const Acts a = make_acts(*qk, t, x, m, k);
      std::vector<float> all(size_t(m * n));
      gemm_for(*qk, t)(m, n, k, a.bytes.data(), a.stride, w.data(), row_bytes, all.data(), n);
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> one(static_cast<size_t>(n));
        gemm_for(*qk, t)(1, n, k, a.bytes.data() + size_t(i) * a.stride, a.stride, w.data(), row_bytes, one.data(), n);
        CHECK(std::memcmp(one.data(), all.data() + i * n, size_t(n) * sizeof(float)) == 0);
      }
    }
}

double wide_rounding_bound(const float* w, const float* x, int64_t k);

// The prompt kernels' activation rows for m rows of k values, and their values as f32 (d · q).
Acts prompt_acts(const PromptKernels& pk, const std::vector<float>& x, int64_t m, int64_t k) {
  Acts a;
  a.stride = pk.act_row_bytes(k);
  a.bytes.resize(a.stride * size_t(m));
  for (int64_t i = 0; i < m; ++i) pk.quantize_act(x.data() + i * k, a.bytes.data() + size_t(i) * a.stride, k);
  return a;
}

// The 16-bit table's activation rows are the blocks of quantize_act32_wide.
void check_act16_blocks(const QuantKernels& sc, const Acts& a16, const std::vector<float>& x, int64_t m, int64_t k) {
  for (int64_t i = 0; i < m; ++i) {
    std::vector<ActBlock32W> ref(size_t(k / 32));
    sc.quantize_act32_wide(x.data() + i * k, ref.data(), k);
    CHECK(std::memcmp(ref.data(), a16.bytes.data() + size_t(i) * a16.stride, ref.size() * sizeof(ActBlock32W)) == 0);
  }
}

// y [m][n] is the product of the unquantised rows x with the weights' values wf within the
// 16-bit rounding bound (as the output head's Q8_0 kernel).
void check_within_wide_bound(const std::vector<float>& y, const std::vector<float>& wf, const std::vector<float>& x,
                             int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const DotRef r = dot_ref(wf.data() + j * k, x.data() + i * k, k);
      CHECK(std::fabs(y[size_t(i * n + j)] - r.value) <=
            wide_rounding_bound(wf.data() + j * k, x.data() + i * k, k) + 1e-6 * r.magnitude + 1e-7);
    }
}

TEST_CASE("quant kernels: the AVX-512 VNNI prompt kernels: 16-bit within its rounding of f32, 8-bit equal to the portable kernels, rows independent") {
  const PromptKernels* p16 = prompt_kernels_vnni16();
  const PromptKernels* p8 = prompt_kernels_vnni8();
  if (!p16 || !p8) {
    MESSAGE("skipped: this CPU has no AVX-512 VNNI (prompts take dequantised tiles into SGEMM here)");
    return;
  }
  const QuantKernels& sc = quant_kernels_scalar();
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    // m: register tiles of 8 rows and tails; n: groups of 16 weight rows and a partial group.
    for (const auto& [m, n, blocks] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 16, 2}, {8, 17, 1},
                                        {13, 37, 3}, {33, 5, 2}}) {
      CAPTURE(ggml_type_name(t));
      CAPTURE(m);
      CAPTURE(n);
      const int64_t k = 256 * blocks;
      const std::vector<uint8_t> w = random_rows(t, n, k, uint32_t(k + n + m));
      const size_t row_bytes = ggml_row_bytes(t, k);
      const std::vector<float> x = test::random_vec(size_t(m * k), uint64_t(m * 7 + k), 2.f);
      std::vector<float> wf(size_t(n * k));
      for (int64_t j = 0; j < n; ++j) dequantize_row(t, w.data() + size_t(j) * row_bytes, wf.data() + j * k, k);

      // 8-bit: the activation bytes of the K-quant kernels, the same integer sums (f32 steps fused).
      const Acts a = make_acts(sc, t, x, m, k), a8 = prompt_acts(*p8, x, m, k);
      REQUIRE(a.bytes == a8.bytes);
      std::vector<float> ys(size_t(m * n)), y8(size_t(m * n), -1.f);
      gemm_for(sc, t)(m, n, k, a.bytes.data(), a.stride, w.data(), row_bytes, ys.data(), n);
      prompt_gemm_for(*p8, t)(m, n, k, a8.bytes.data(), a8.stride, w.data(), row_bytes, y8.data(), n);
      for (size_t i = 0; i < ys.size(); ++i) CHECK(std::fabs(ys[i] - y8[i]) <= 2e-5 * (std::fabs(ys[i]) + 1.f));

      // 16-bit: the blocks of quantize_act32_wide, and the product of the unquantised rows within
      // the 16-bit rounding bound (as the output head's Q8_0 kernel).
      const Acts a16 = prompt_acts(*p16, x, m, k);
      check_act16_blocks(sc, a16, x, m, k);
      std::vector<float> y16(size_t(m * n), -1.f);
      prompt_gemm_for(*p16, t)(m, n, k, a16.bytes.data(), a16.stride, w.data(), row_bytes, y16.data(), n);
      check_within_wide_bound(y16, wf, x, m, n, k);

      // Each row alone has its bits in the batch, in both tables.
      for (const auto& [pk, acts, batch] : {std::tuple{p8, &a8, &y8}, std::tuple{p16, &a16, &y16}})
        for (int64_t i = 0; i < m; ++i) {
          std::vector<float> one(static_cast<size_t>(n));
          prompt_gemm_for(*pk, t)(1, n, k, acts->bytes.data() + size_t(i) * acts->stride, acts->stride, w.data(),
                                  row_bytes, one.data(), n);
          CHECK(std::memcmp(one.data(), batch->data() + i * n, size_t(n) * sizeof(float)) == 0);
        }
    }
  // Extreme values: every weight byte 0xff (Q6_K scales −128) and activations at ±full scale in
  // every lane (the largest integer sums the kernels take): no overflow.
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    CAPTURE(ggml_type_name(t));
    const int64_t m = 2, n = 3, k = 512;
    std::vector<uint8_t> w = random_rows(t, n, k, 5);
    const size_t row_bytes = ggml_row_bytes(t, k);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t b = 0; b < k / 256; ++b) {
        uint8_t* blk = w.data() + size_t(j) * row_bytes + size_t(b) * ggml_block_bytes(t);
        if (t == GgmlType::Q6_K) std::memset(blk, 0xff, 192), std::memset(blk + 192, 0x80, 16);
        else std::memset(blk + 4, 0xff, ggml_block_bytes(t) - 4);
      }
    std::vector<float> x(size_t(m * k), 1.f);
    for (int64_t c = 0; c < k; c += 2) x[size_t(k + c)] = -1.f;
    std::vector<float> wf(size_t(n * k));
    for (int64_t j = 0; j < n; ++j) dequantize_row(t, w.data() + size_t(j) * row_bytes, wf.data() + j * k, k);
    for (const PromptKernels* pk : {p8, p16}) {
      const Acts a = prompt_acts(*pk, x, m, k);
      std::vector<float> y(size_t(m * n));
      prompt_gemm_for(*pk, t)(m, n, k, a.bytes.data(), a.stride, w.data(), row_bytes, y.data(), n);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const DotRef r = dot_ref(wf.data() + j * k, x.data() + i * k, k);
          CHECK(std::fabs(y[size_t(i * n + j)] - r.value) <= 1e-4 * r.magnitude + 1e-6);
        }
    }
  }
  const bool no_q8_0_kernel = prompt_gemm_for(*p16, GgmlType::Q8_0) == nullptr;  // Q8_0 keeps its own path
  CHECK(no_q8_0_kernel);
}

TEST_CASE("quant kernels: the AVX-512 VNNI prompt kernels on legacy blocks: within 16-bit rounding of f32, k any multiple of 32, rows independent") {
  const PromptKernels* p16 = prompt_kernels_vnni16();
  if (!p16) {
    MESSAGE("skipped: this CPU has no AVX-512 VNNI (prompts on legacy types take dequantised tiles into SGEMM here)");
    return;
  }
  const QuantKernels& sc = quant_kernels_scalar();
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1})
    // blocks: one chunk of eight and partial chunks (576 and 640 columns: SmolLM2's and Gemma 3's).
    for (const auto& [m, n, blocks] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 16, 8}, {8, 17, 18},
                                        {13, 37, 20}, {33, 5, 11}}) {
      CAPTURE(ggml_type_name(t));
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(blocks);
      const int64_t k = 32 * blocks;
      const std::vector<uint8_t> w = random_rows(t, n, k, uint32_t(k + n + m));
      const size_t row_bytes = ggml_row_bytes(t, k);
      const std::vector<float> x = test::random_vec(size_t(m * k), uint64_t(m * 7 + k), 2.f);
      std::vector<float> wf(size_t(n * k));
      for (int64_t j = 0; j < n; ++j) dequantize_row(t, w.data() + size_t(j) * row_bytes, wf.data() + j * k, k);
      const Acts a16 = prompt_acts(*p16, x, m, k);
      check_act16_blocks(sc, a16, x, m, k);
      const GemmFn gemm = prompt_gemm_for(*p16, t);
      REQUIRE(static_cast<bool>(gemm));
      std::vector<float> y(size_t(m * n), -1.f);
      gemm(m, n, k, a16.bytes.data(), a16.stride, w.data(), row_bytes, y.data(), n);
      check_within_wide_bound(y, wf, x, m, n, k);
      for (int64_t i = 0; i < m; ++i) {  // each row alone has its bits in the batch
        std::vector<float> one(static_cast<size_t>(n));
        gemm(1, n, k, a16.bytes.data() + size_t(i) * a16.stride, a16.stride, w.data(), row_bytes, one.data(), n);
        CHECK(std::memcmp(one.data(), y.data() + i * n, size_t(n) * sizeof(float)) == 0);
      }
    }
  // Extreme values: every quant byte 0xff (the largest values, Q5's fifth bits set) against
  // activations at ±full scale: no overflow.
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    CAPTURE(ggml_type_name(t));
    const int64_t m = 2, n = 3, k = 320;
    std::vector<uint8_t> w = random_rows(t, n, k, 5);
    const size_t row_bytes = ggml_row_bytes(t, k), bb = ggml_block_bytes(t);
    const size_t scales = (t == GgmlType::Q4_1 || t == GgmlType::Q5_1) ? 4 : 2;
    for (size_t off = 0; off < w.size(); off += bb) std::memset(w.data() + off + scales, 0xff, bb - scales);
    std::vector<float> x(size_t(m * k), 1.f);
    for (int64_t c = 0; c < k; c += 2) x[size_t(k + c)] = -1.f;
    std::vector<float> wf(size_t(n * k));
    for (int64_t j = 0; j < n; ++j) dequantize_row(t, w.data() + size_t(j) * row_bytes, wf.data() + j * k, k);
    const Acts a = prompt_acts(*p16, x, m, k);
    std::vector<float> y(size_t(m * n));
    prompt_gemm_for(*p16, t)(m, n, k, a.bytes.data(), a.stride, w.data(), row_bytes, y.data(), n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const DotRef r = dot_ref(wf.data() + j * k, x.data() + i * k, k);
        CHECK(std::fabs(y[size_t(i * n + j)] - r.value) <= 1e-4 * r.magnitude + 1e-6);
      }
  }
  const PromptKernels* p8 = prompt_kernels_vnni8();  // 256-value activation blocks: no legacy kernels
  const bool no_8_bit_kernel = prompt_gemm_for(*p8, GgmlType::Q4_1) == nullptr;
  CHECK(no_8_bit_kernel);
  // RAGKV_PREFILL_KERNELS=kquants: the 16-bit table's K-quant kernels, none for legacy blocks.
  const PromptKernels* pk = prompt_kernels_vnni16_kquants();
  REQUIRE(pk != nullptr);
  const bool same_acts = pk->act_row_bytes == p16->act_row_bytes && pk->quantize_act == p16->quantize_act;
  CHECK(same_acts);
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K}) {
    const bool same_kernel = prompt_gemm_for(*pk, t) == prompt_gemm_for(*p16, t);
    CHECK(same_kernel);
  }
  const bool same_rows16 = pk->gemm_q4_k_rows16 == p16->gemm_q4_k_rows16;
  CHECK(same_rows16);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    const bool no_kernel = prompt_gemm_for(*pk, t) == nullptr;
    CHECK(no_kernel);
  }
}

TEST_CASE("quant kernels: the AVX-512 VNNI Q4_K decode kernel equals the portable kernel, each row alone as in a batch") {
  const GemmFn q4k = gemm_q4_k_decode_vnni();
  if (!q4k) {
    MESSAGE("skipped: this CPU has no AVX-512 VNNI (Q4_K decodes on the AVX2 table here)");
    return;
  }
  const QuantKernels& sc = quant_kernels_scalar();
  for (const Case& c : kCases) {
    CAPTURE(c.m);
    CAPTURE(c.n);
    const int64_t k = 256 * c.blocks;
    const std::vector<uint8_t> w = random_rows(GgmlType::Q4_K, c.n, k, uint32_t(3 * k + c.n));
    const size_t row_bytes = ggml_row_bytes(GgmlType::Q4_K, k);
    const std::vector<float> x = test::random_vec(size_t(c.m * k), uint64_t(c.m + 11 * k), 2.f);
    const Acts a = make_acts(sc, GgmlType::Q4_K, x, c.m, k);
    std::vector<float> ys(size_t(c.m * c.n)), yv(size_t(c.m * c.n));
    gemm_for(sc, GgmlType::Q4_K)(c.m, c.n, k, a.bytes.data(), a.stride, w.data(), row_bytes, ys.data(), c.n);
    q4k(c.m, c.n, k, a.bytes.data(), a.stride, w.data(), row_bytes, yv.data(), c.n);
    for (size_t i = 0; i < ys.size(); ++i) CHECK(std::fabs(ys[i] - yv[i]) <= 2e-5 * (std::fabs(ys[i]) + 1.f));
    for (int64_t i = 0; i < c.m; ++i) {
      std::vector<float> one(static_cast<size_t>(c.n));
      q4k(1, c.n, k, a.bytes.data() + size_t(i) * a.stride, a.stride, w.data(), row_bytes, one.data(), c.n);
      CHECK(std::memcmp(one.data(), yv.data() + i * c.n, size_t(c.n) * sizeof(float)) == 0);
    }
  }
}

// Q4_K rows in the Q4KRows16 layout, 64-aligned as the backend keeps them.
struct Rows16 {
  std::vector<uint8_t> bytes;
  uint8_t* data() { return bytes.data() + (64 - reinterpret_cast<uintptr_t>(bytes.data()) % 64) % 64; }
};
Rows16 repack_rows16(const Q4KRows16& p, const std::vector<uint8_t>& w, int64_t n, int64_t k) {
  Rows16 r;
  r.bytes.assign(p.bytes(n, k) + 64, 0xa5);
  p.repack(w.data(), ggml_row_bytes(GgmlType::Q4_K, k), n, k, r.data());
  return r;
}

TEST_CASE("quant kernels: Q4_K rows repacked at load (Q4KRows16): decode equals the portable kernel, prompts the 16-bit table's bits, rows independent") {
  const Q4KRows16* p = q4_k_rows16();
  const PromptKernels* p16 = prompt_kernels_vnni16();
  const PromptKernels* p8 = prompt_kernels_vnni8();
  if (!p || !p16 || !p8) {
    MESSAGE("skipped: this CPU has no AVX-512 VNNI (Q4_K weights stay as the file has them here)");
    return;
  }
  const QuantKernels& sc = quant_kernels_scalar();
  // n: whole groups of 16, partial ones, several groups; m: register tiles of 4 rows and tails.
  for (const auto& [m, n, blocks] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {2, 16, 2}, {5, 17, 1},
                                      {4, 40, 3}, {9, 33, 2}, {13, 7, 1}}) {
    CAPTURE(m);
    CAPTURE(n);
    const int64_t k = 256 * blocks;
    const std::vector<uint8_t> w = random_rows(GgmlType::Q4_K, n, k, uint32_t(5 * k + n + m));
    const size_t row_bytes = ggml_row_bytes(GgmlType::Q4_K, k);
    Rows16 r16 = repack_rows16(*p, w, n, k);
    const size_t group = p->group_bytes(k);
    const std::vector<float> x = test::random_vec(size_t(m * k), uint64_t(3 * m + k), 2.f);

    // Decode: the portable kernel's integer sums, its f32 steps to rounding.
    const Acts a = make_acts(sc, GgmlType::Q4_K, x, m, k);
    std::vector<float> ys(size_t(m * n)), yr(size_t(m * n), -1.f);
    gemm_for(sc, GgmlType::Q4_K)(m, n, k, a.bytes.data(), a.stride, w.data(), row_bytes, ys.data(), n);
    p->gemm(m, n, k, a.bytes.data(), a.stride, r16.data(), group, yr.data(), n);
    for (size_t i = 0; i < ys.size(); ++i) CHECK(std::fabs(ys[i] - yr[i]) <= 2e-5 * (std::fabs(ys[i]) + 1.f));
    // The 8-bit prompt table's kernel on the layout is that kernel.
    CHECK((p8->gemm_q4_k_rows16 == p->gemm));

    // Prompts: the 16-bit table on the layout has the bits of the table on the file's rows.
    const Acts a16 = prompt_acts(*p16, x, m, k);
    std::vector<float> yf(size_t(m * n)), yp(size_t(m * n), -1.f);
    p16->gemm_q4_k(m, n, k, a16.bytes.data(), a16.stride, w.data(), row_bytes, yf.data(), n);
    p16->gemm_q4_k_rows16(m, n, k, a16.bytes.data(), a16.stride, r16.data(), group, yp.data(), n);
    CHECK(std::memcmp(yf.data(), yp.data(), yf.size() * sizeof(float)) == 0);

    // Each activation row alone has its bits in the batch; a call from a later group (a tile)
    // gives those rows' bits.
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> one(static_cast<size_t>(n));
      p->gemm(1, n, k, a.bytes.data() + size_t(i) * a.stride, a.stride, r16.data(), group, one.data(), n);
      CHECK(std::memcmp(one.data(), yr.data() + i * n, size_t(n) * sizeof(float)) == 0);
    }
    if (n > 16) {
      std::vector<float> tail(size_t(m * (n - 16)));
      p->gemm(m, n - 16, k, a.bytes.data(), a.stride, r16.data() + group, group, tail.data(), n - 16);
      for (int64_t i = 0; i < m; ++i)
        CHECK(std::memcmp(tail.data() + i * (n - 16), yr.data() + i * n + 16, size_t(n - 16) * sizeof(float)) == 0);
    }
  }
  // Extreme blocks: every byte after d and dmin 0xff (scales and mins 63, every value 15) against
  // activations at ±full scale: no overflow, the double-precision product to f32 rounding.
  const int64_t m = 2, n = 3, k = 512;
  std::vector<uint8_t> w = random_rows(GgmlType::Q4_K, n, k, 9);
  const size_t row_bytes = ggml_row_bytes(GgmlType::Q4_K, k);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t b = 0; b < k / 256; ++b)
      std::memset(w.data() + size_t(j) * row_bytes + size_t(b) * 144 + 4, 0xff, 140);
  Rows16 r16 = repack_rows16(*p, w, n, k);
  std::vector<float> x(size_t(m * k), 1.f);
  for (int64_t c = 0; c < k; c += 2) x[size_t(k + c)] = -1.f;
  std::vector<float> wf(size_t(n * k));
  for (int64_t j = 0; j < n; ++j)
    dequantize_row(GgmlType::Q4_K, w.data() + size_t(j) * row_bytes, wf.data() + j * k, k);
  for (const PromptKernels* pk : {p8, p16}) {
    const Acts a = prompt_acts(*pk, x, m, k);
    std::vector<float> y(size_t(m * n));
    pk->gemm_q4_k_rows16(m, n, k, a.bytes.data(), a.stride, r16.data(), p->group_bytes(k), y.data(), n);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const DotRef r = dot_ref(wf.data() + j * k, x.data() + i * k, k);
        CHECK(std::fabs(y[size_t(i * n + j)] - r.value) <= 1e-4 * r.magnitude + 1e-6);
      }
  }
}

TEST_CASE("quant kernels: the AVX-512 VNNI Q6_K head kernel is within 16-bit rounding of f32, each row alone as in a batch") {
  const GemmFn head = gemm_q6_k_wide_vnni();
  if (!head) {
    MESSAGE("skipped: this CPU has no AVX-512 VNNI (a Q6_K head meets dequantised rows here)");
    return;
  }
  const QuantKernels& sc = quant_kernels_scalar();
  for (const auto& [m, n, blocks] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {1, 9, 3}, {3, 5, 2}, {5, 7, 1},
                                      {7, 3, 4}}) {
    CAPTURE(m);
    CAPTURE(n);
    const int64_t k = 256 * blocks;
    const std::vector<uint8_t> w = random_rows(GgmlType::Q6_K, n, k, uint32_t(k + n));
    const size_t row_bytes = ggml_row_bytes(GgmlType::Q6_K, k);
    const std::vector<float> x = test::random_vec(size_t(m * k), uint64_t(m + 3 * k), 2.f);
    std::vector<float> wf(size_t(n * k));
    for (int64_t j = 0; j < n; ++j) dequantize_row(GgmlType::Q6_K, w.data() + size_t(j) * row_bytes, wf.data() + j * k, k);
    const size_t stride = act_row_bytes(ActFormat::q16_32, k);
    std::vector<uint8_t> a(stride * size_t(m));
    for (int64_t i = 0; i < m; ++i)
      sc.quantize_act32_wide(x.data() + i * k, reinterpret_cast<ActBlock32W*>(a.data() + size_t(i) * stride), k);
    std::vector<float> y(size_t(m * n));
    head(m, n, k, a.data(), stride, w.data(), row_bytes, y.data(), n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const DotRef r = dot_ref(wf.data() + j * k, x.data() + i * k, k);
        CHECK(std::fabs(y[size_t(i * n + j)] - r.value) <=
              wide_rounding_bound(wf.data() + j * k, x.data() + i * k, k) + 1e-6 * r.magnitude + 1e-7);
      }
      std::vector<float> one(static_cast<size_t>(n));
      head(1, n, k, a.data() + size_t(i) * stride, stride, w.data(), row_bytes, one.data(), n);
      CHECK(std::memcmp(one.data(), y.data() + i * n, size_t(n) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("quant kernels: the wide-activation Q8_0 head kernel gives a row the same bits alone and in a batch") {
  // A decode step of one sequence and a batch of several run different register tiles; each
  // output must still see the same operations in the same order.
  for (const QuantKernels* qk : tables())
    for (const int64_t n : {1, 3, 4, 7, 9}) {
      CAPTURE(qk->name);
      CAPTURE(n);
      const int64_t m = 5, k = 32 * 7;
      const std::vector<uint8_t> w = random_rows(GgmlType::Q8_0, n, k, uint32_t(17 + n));
      const size_t rb = ggml_row_bytes(GgmlType::Q8_0, k);
      const std::vector<float> x = test::random_vec(size_t(m * k), uint64_t(5 + n), 2.f);
      const Acts a = make_acts(*qk, GgmlType::Q8_0, x, m, k, /*wide=*/true);
      std::vector<float> all(size_t(m * n));
      qk->gemm_q8_0_wide(m, n, k, a.bytes.data(), a.stride, w.data(), rb, all.data(), n);
      for (int64_t i = 0; i < m; ++i) {
        std::vector<float> one(static_cast<size_t>(n));
        qk->gemm_q8_0_wide(1, n, k, a.bytes.data() + size_t(i) * a.stride, a.stride, w.data(), rb, one.data(), n);
        CHECK(std::memcmp(one.data(), all.data() + i * n, size_t(n) * sizeof(float)) == 0);
      }
    }
}

TEST_CASE("quant kernels: the CPU backend's matmul on quantised and stacked weights equals the kernels' reference") {
  auto b = make_cpu_backend(2);
  const int64_t k = 512, n = 8;
  const GgmlType parts_t[3] = {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q6_K};
  const int64_t rows[3] = {67, 5, 130};  // enough rows for several tiles, odd counts
  std::vector<std::vector<uint8_t>> data;
  std::vector<GgufTensor> ts(3);
  for (int p = 0; p < 3; ++p) {
    data.push_back(random_rows(parts_t[p], rows[p], k, uint32_t(p + 1)));
    ts[p].name = "part" + std::to_string(p);
    ts[p].type = parts_t[p];
    ts[p].ne = {k, rows[p]};
    ts[p].nbytes = data[p].size();
    ts[p].data = data[p].data();
  }
  const std::vector<float> x = test::random_vec(size_t(n * k), 3);
  Tensor X = test::upload(*b, x, n, k);
  const GgufTensor* ptrs[3] = {&ts[0], &ts[1], &ts[2]};
  for (const WeightMemory mem : {WeightMemory::copy, WeightMemory::in_place, WeightMemory::kernel_layout}) {
    CAPTURE(int(mem));
    auto stack = b->load_weight_stack(ptrs, "stack", mem);
    REQUIRE(stack->out_features == 67 + 5 + 130);
    // The Q4_K part in the kernels' layout exactly where they run (and only that part).
    const bool rows16 = mem == WeightMemory::kernel_layout && q4_k_rows16() && prompt_kernels();
    CHECK((cpu_weight(*stack).parts[0].rows16 != nullptr) == rows16);
    CHECK(cpu_weight(*stack).parts[2].rows16 == nullptr);
    Tensor outs[3] = {b->alloc(DType::f32, n, rows[0]), b->alloc(DType::f32, n, rows[1]), b->alloc(DType::f32, n, rows[2])};
    b->matmul_parts(X, *stack, outs, {}, Activations::block8);
    Tensor whole = b->alloc(DType::f32, n, stack->out_features);
    b->matmul(X, *stack, whole, nullptr, Activations::block8);
    const std::vector<float> wh = test::download(*b, whole);
    int64_t first = 0;
    for (int p = 0; p < 3; ++p) {
      CAPTURE(ggml_type_name(parts_t[p]));
      auto alone = b->load_weight(ts[p], mem);
      Tensor y = b->alloc(DType::f32, n, rows[p]);
      b->matmul(X, *alone, y, nullptr, Activations::block8);
      const std::vector<float> ya = test::download(*b, y), yp = test::download(*b, outs[p]);
      CHECK(ya == yp);  // a part of a stack computes exactly what it computes alone
      for (int64_t i = 0; i < n; ++i)
        CHECK(std::memcmp(&wh[i * stack->out_features + first], &ya[i * rows[p]], size_t(rows[p]) * sizeof(float)) == 0);
      // Against dequantised weights and quantised activations in double precision.
      const QuantKernels& qk = quant_kernels();
      const Acts a = make_acts(qk, parts_t[p], x, n, k);
      std::vector<float> wf(static_cast<size_t>(k));
      const size_t rb = ggml_row_bytes(parts_t[p], k);
      for (int64_t j = 0; j < rows[p]; ++j) {
        dequantize_row(parts_t[p], data[p].data() + j * rb, wf.data(), k);
        for (int64_t i = 0; i < n; ++i) {
          const auto [s, mag] = dot_ref(wf.data(), a.values.data() + i * k, k);
          CHECK(std::fabs(ya[i * rows[p] + j] - s) <= 1e-5 * mag + 1e-6);
        }
      }
      first += rows[p];
    }
  }
}

TEST_CASE("quant kernels: a Q4_K weight in the kernels' layout gives a prompt the bits of the weight in place") {
  auto b = make_cpu_backend(2);
  const int64_t k = 768, rows = 50;
  const std::vector<uint8_t> data = random_rows(GgmlType::Q4_K, rows, k, 21);
  GgufTensor t;
  t.name = "w";
  t.type = GgmlType::Q4_K;
  t.ne = {k, rows};
  t.nbytes = data.size();
  t.data = data.data();
  auto in_place = b->load_weight(t, WeightMemory::in_place);
  auto layout = b->load_weight(t, WeightMemory::kernel_layout);
  for (const int64_t n : {1, 3, 40}) {
    CAPTURE(n);
    Tensor X = test::upload(*b, test::random_vec(size_t(n * k), uint64_t(n)), n, k);
    for (const Activations act : {Activations::f32, Activations::block8}) {
      Tensor y1 = b->alloc(DType::f32, n, rows), y2 = b->alloc(DType::f32, n, rows);
      b->matmul(X, *in_place, y1, nullptr, act);
      b->matmul(X, *layout, y2, nullptr, act);
      const std::vector<float> v1 = test::download(*b, y1), v2 = test::download(*b, y2);
      if (act == Activations::f32) {
        CHECK(v1 == v2);  // prompts: the same int16 values and steps
      } else {
        for (size_t i = 0; i < v1.size(); ++i) CHECK(std::fabs(v1[i] - v2[i]) <= 2e-5 * (std::fabs(v1[i]) + 1.f));
      }
    }
  }
}

// The largest error 16-bit activation blocks may add to x · w: half a quantisation step per value,
// Σ |w_c| · d_b / 2 with d_b = max |x| over c's block / 32767 (a little slack for f32 rounding).
double wide_rounding_bound(const float* w, const float* x, int64_t k) {
  double bound = 0;
  for (int64_t b = 0; b < k / 32; ++b) {
    double amax = 0, wsum = 0;
    for (int c = 0; c < 32; ++c) {
      amax = std::max(amax, double(std::fabs(x[b * 32 + c])));
      wsum += std::fabs(double(w[b * 32 + c]));
    }
    bound += wsum * amax / 32767 / 2;
  }
  return bound * 1.01;
}

TEST_CASE("quant kernels: a weight marked wide_activations keeps its activations within 16-bit rounding (the output head)") {
  // The Q8_0 kernel on 16-bit activation blocks: each table against dequantised weights times the
  // blocks' values in double (the kernel's own error), against the f32 activations within the
  // blocks' rounding bound, and the portable table against AVX2.
  for (const Case& c : kCases) {
    const int64_t k = 32 * c.blocks;
    const std::vector<uint8_t> w = random_rows(GgmlType::Q8_0, c.n, k, uint32_t(7 * k + c.n));
    const size_t rb = ggml_row_bytes(GgmlType::Q8_0, k);
    const std::vector<float> x = test::random_vec(size_t(c.m * k), uint64_t(c.m * 31 + k), 2.f);
    std::vector<std::vector<float>> ys;
    for (const QuantKernels* qk : tables()) {
      CAPTURE(qk->name);
      const Acts a = make_acts(*qk, GgmlType::Q8_0, x, c.m, k, /*wide=*/true);
      std::vector<float> y(size_t(c.m * c.n));
      qk->gemm_q8_0_wide(c.m, c.n, k, a.bytes.data(), a.stride, w.data(), rb, y.data(), c.n);
      std::vector<float> wf(static_cast<size_t>(k));
      for (int64_t j = 0; j < c.n; ++j) {
        dequantize_row(GgmlType::Q8_0, w.data() + j * rb, wf.data(), k);
        for (int64_t i = 0; i < c.m; ++i) {
          double s = 0, sx = 0, mag = 0;
          for (int64_t t = 0; t < k; ++t) {
            s += double(wf[t]) * a.values[i * k + t];
            sx += double(wf[t]) * x[i * k + t];
            mag += std::fabs(double(wf[t]) * x[i * k + t]);
          }
          CHECK(std::fabs(y[i * c.n + j] - s) <= 1e-6 * mag + 1e-7);
          CHECK(std::fabs(y[i * c.n + j] - sx) <= wide_rounding_bound(wf.data(), x.data() + i * k, k) + 1e-6 * mag + 1e-7);
        }
      }
      ys.push_back(std::move(y));
    }
    if (ys.size() == 2)
      for (size_t i = 0; i < ys[0].size(); ++i) CHECK(std::fabs(ys[0][i] - ys[1][i]) <= 2e-5 * (std::fabs(ys[0][i]) + 1.f));
  }

  // The backend: a marked weight (Q8_0 by its 16-bit kernel, and Q6_K by its own where the CPU
  // has AVX-512 VNNI, within the blocks' rounding bound; other Q4_K and Q6_K parts by dequantised
  // tiles, exactly f32) equals dequantised weights times f32
  // activations in decode-sized calls even when the call allows 8-bit activations (block8), while
  // the same weight unmarked rounds them to 8 bits (and differs 100 times more); and with
  // Activations::f32 the unmarked weight equals the marked one exactly (K-quants where the CPU has
  // the prompt kernels: within 16-bit rounding of f32, the prompts' precision).
  auto b = make_cpu_backend(2);
  const int64_t k = 512;
  for (const GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    CAPTURE(ggml_type_name(t));
    const int64_t rows = 70;
    std::vector<uint8_t> data = random_rows(t, rows, k, 11);
    GgufTensor ts;
    ts.name = "head";
    ts.type = t;
    ts.ne = {k, rows};
    ts.nbytes = data.size();
    ts.data = data.data();
    auto marked = b->load_weight(ts), plain = b->load_weight(ts);
    marked->wide_activations = true;
    for (const int64_t n : {int64_t(1), int64_t(3)}) {
      const std::vector<float> x = test::random_vec(size_t(n * k), uint64_t(n + 5), 2.f);
      Tensor X = test::upload(*b, x, n, k), ym = b->alloc(DType::f32, n, rows), yp = b->alloc(DType::f32, n, rows);
      b->matmul(X, *marked, ym, nullptr, Activations::block8);
      b->matmul(X, *plain, yp, nullptr, Activations::block8);
      const std::vector<float> vm = test::download(*b, ym), vp = test::download(*b, yp);
      std::vector<float> wf(static_cast<size_t>(k));
      double worst_plain = 0, worst_marked = 0;
      for (int64_t j = 0; j < rows; ++j) {
        dequantize_row(t, data.data() + j * ggml_row_bytes(t, k), wf.data(), k);
        for (int64_t i = 0; i < n; ++i) {
          const auto [s, mag] = dot_ref(wf.data(), x.data() + i * k, k);
          const bool wide16 = t == GgmlType::Q8_0 || (t == GgmlType::Q6_K && gemm_q6_k_wide_vnni() && prompt_kernels());
          const double rounding = wide16 ? wide_rounding_bound(wf.data(), x.data() + i * k, k) : 0.0;
          CHECK(std::fabs(vm[i * rows + j] - s) <= rounding + 1e-6 * mag + 1e-7);
          worst_marked = std::max(worst_marked, std::fabs(vm[i * rows + j] - s) / (mag + 1e-7));
          worst_plain = std::max(worst_plain, std::fabs(vp[i * rows + j] - s) / (mag + 1e-7));
        }
      }
      CHECK(worst_plain > 1e-5);  // the 8-bit activations are visibly rounded: the mark matters
      CHECK(worst_marked * 100 < worst_plain);
      Tensor yf = b->alloc(DType::f32, n, rows);
      b->matmul(X, *plain, yf);  // Activations::f32, the default
      const std::vector<float> vf = test::download(*b, yf);
      if (t == GgmlType::Q8_0 || !prompt_kernels()) {
        CHECK(vf == vm);
      } else {
        // K-quant prompts of any length take the prompt kernels here: 16-bit blocks, within their
        // rounding of the f32 product.
        for (int64_t j = 0; j < rows; ++j) {
          dequantize_row(t, data.data() + j * ggml_row_bytes(t, k), wf.data(), k);
          for (int64_t i = 0; i < n; ++i) {
            const auto [s, mag] = dot_ref(wf.data(), x.data() + i * k, k);
            CHECK(std::fabs(vf[i * rows + j] - s) <= wide_rounding_bound(wf.data(), x.data() + i * k, k) + 1e-6 * mag + 1e-7);
          }
        }
      }
    }
  }
}

// Fuzz regression: activations of a corrupt model hold NaN; the portable table rounded them with
// an undefined float-to-int8 conversion. Both tables give -128 (the AVX2 conversion's integer
// indefinite, saturated), and the rest of the block is unaffected.
TEST_CASE("quant kernels: a NaN activation quantises to -128 (-32768 in 16-bit blocks) in every table (fuzz regression)") {
  std::vector<float> x(256, 0.25f);
  x[3] = NAN;
  x[40] = 2.f;
  for (const QuantKernels* t : {&quant_kernels_scalar(), quant_kernels_avx2()}) {
    if (!t) continue;
    CAPTURE(t->name);
    std::vector<ActBlock32> a32(8);
    std::vector<ActBlock256> a256(1);
    std::vector<ActBlock32W> a16(8);
    t->quantize_act32(x.data(), a32.data(), 256);
    t->quantize_act256(x.data(), a256.data(), 256);
    t->quantize_act32_wide(x.data(), a16.data(), 256);
    CHECK(a16[0].q[3] == -32768);
    CHECK(a16[0].q[4] == 32767);
    CHECK(a16[1].q[8] == 32767);
    CHECK(a32[0].q[3] == -128);
    CHECK(a32[0].q[4] == 127);  // 0.25 is the block's largest value
    CHECK(a32[1].q[8] == 127);
    CHECK(a256[0].q[3] == -128);
  }
}

TEST_CASE("quant kernels: each table's dequantisers give dequantize_row's values bit for bit") {
  const GgmlType types[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                            GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};
  for (const QuantKernels* qk : tables())
    for (const GgmlType t : types)
      for (const int64_t blocks : {1, 2, 5}) {
        CAPTURE(qk->name);
        CAPTURE(ggml_type_name(t));
        CAPTURE(blocks);
        const int64_t k = ggml_block_elems(t) * blocks, n = 3;
        const std::vector<uint8_t> w = random_rows(t, n, k, uint32_t(100 + blocks));
        const size_t rb = ggml_row_bytes(t, k);
        for (int64_t j = 0; j < n; ++j) {
          std::vector<float> want(static_cast<size_t>(k)), got(static_cast<size_t>(k), -1.f);
          dequantize_row(t, w.data() + j * rb, want.data(), k);
          dequantize_row_with(*qk, t, w.data() + j * rb, got.data(), k);
          CHECK(std::memcmp(want.data(), got.data(), size_t(k) * sizeof(float)) == 0);
        }
      }
}

TEST_CASE("quant kernels: each table's f32 row product equals the double-precision product (tails included)") {
  for (const QuantKernels* qk : tables())
    for (const int64_t k : {1, 7, 8, 33, 512})
      for (const int64_t m : {1, 3, 5}) {
        CAPTURE(qk->name);
        CAPTURE(k);
        CAPTURE(m);
        const int64_t n = 6;
        const std::vector<float> w = test::random_vec(size_t(n * k), uint32_t(k + m)),
                                 x = test::random_vec(size_t(m * k), uint32_t(7 * k + m));
        std::vector<float> y(size_t(m * n), -1.f);
        qk->gemm_f32(m, n, k, x.data(), size_t(k) * sizeof(float), reinterpret_cast<const uint8_t*>(w.data()),
                     size_t(k) * sizeof(float), y.data(), n);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const auto [s, mag] = dot_ref(w.data() + j * k, x.data() + i * k, k);
            CHECK(std::fabs(y[i * n + j] - s) <= 1e-6 * mag + 1e-7);
          }
      }
}

// A decode step's head on a type without wide kernels (Q4_K, Q6_K: 8B-shaped GGUFs) meets f32
// activations through dequantised rows and the f32 row kernel; from kDequantRowsCalls rows on,
// through SGEMM on dequantised tiles. Both against dequantise-then-f32 in double precision, and
// each activation row's outputs the same bits whatever rows share its call.
TEST_CASE("quant kernels: the CPU backend's matmul with f32 activations on few rows equals the dequantised product") {
  auto b = make_cpu_backend(2);
  const int64_t k = 512, n = 300;
  for (const GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1}) {
    CAPTURE(ggml_type_name(t));
    const std::vector<uint8_t> data = random_rows(t, n, k, 77);
    GgufTensor ts;
    ts.name = "w";
    ts.type = t;
    ts.ne = {k, n};
    ts.nbytes = data.size();
    ts.data = data.data();
    auto w = b->load_weight(ts, WeightMemory::in_place);
    std::vector<float> wf(size_t(n * k));
    const size_t rb = ggml_row_bytes(t, k);
    for (int64_t j = 0; j < n; ++j) dequantize_row(t, data.data() + j * rb, wf.data() + j * k, k);
    for (const int64_t m : {1, 2, 7, 8}) {
      CAPTURE(m);
      const std::vector<float> x = test::random_vec(size_t(m * k), uint32_t(m + 5));
      Tensor X = test::upload(*b, x, m, k);
      Tensor Y = b->alloc(DType::f32, m, n);
      b->matmul(X, *w, Y, nullptr, Activations::f32);
      const std::vector<float> y = test::download(*b, Y);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          const auto [s, mag] = dot_ref(wf.data() + j * k, x.data() + i * k, k);
          CHECK(std::fabs(y[i * n + j] - s) <= 1e-5 * mag + 1e-6);
        }
      if (m > 1 && m < 8) {  // the row path: the last row alone gives the same bits
        Tensor X1 = test::upload(*b, std::vector<float>(x.end() - k, x.end()), 1, k);
        Tensor Y1 = b->alloc(DType::f32, 1, n);
        b->matmul(X1, *w, Y1, nullptr, Activations::f32);
        const std::vector<float> y1 = test::download(*b, Y1);
        CHECK(std::memcmp(y1.data(), y.data() + (m - 1) * n, size_t(n) * sizeof(float)) == 0);
      }
    }
  }
}
