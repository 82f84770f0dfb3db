// CUDA backend ops against the CPU reference backend (DESIGN.md §3, STYLE.md "test-backend-ops").
//
// Every implemented CUDA op runs on the same random inputs as the CPU backend over a table of
// shapes (odd sizes and sizes on both sides of the kernels' block-size switches) and is compared
// element-wise with a stated tolerance:
//   f32 ops (rms_norm, layer_norm, gelu_erf, swiglu, geglu, add, row_sq_dist):
//             |cuda − cpu| ≤ 1e-5 · (1 + |cpu|)
//   f16 rope: |cuda − cpu| ≤ 2e-3 · (1 + |cpu|)   (a result may round to the neighbouring f16)
//   exact:    load_weight (a matrix reads back, through embed, as the CPU's dequantised value:
//             itself for the quantised types kept quantised on the device, rounded to the nearest
//             f16 for the others and under RAGKV_CUDA_WEIGHTS=f16, bit for bit), embed of an
//             f16-exact or quantised table, dequantize_to_f16 (the f16 values load_weight would
//             store), copy, gather_rows, scatter_rows (into f16: the host's round-to-nearest-even).
//   matmul with f16 weights: the GPU rounds x (row-scaled outside [2^-10, 65504]) and W to f16
//             (relative error u = 2^-11 each, or an absolute 2^-25 · unscale in the subnormal
//             range), multiplies exactly and accumulates in f32; the CPU multiplies the f32 values
//             and accumulates in f32. Per product |x̃w̃ − xw| ≤ (2u + u²)|xw| + ηx|w| + ηw|x| (+ ηxηw)
//             with ηw = 2^-25, ηx = 2^-25 · max(1, rowmax|x| / 2^14); each f32 sum of k terms is
//             off by at most k · 2^-24 · Σ|x_k w_k| (twice that for a truncating tensor-core
//             accumulator). Hence, with S = Σ_k |x_k·w_k|, X = Σ_k |x_k|, W = Σ_k |w_k|:
//               |cuda − cpu| ≤ 1.01 · ((2^-10 + 2^-22 + 3k · 2^-24) · S + ηx·W + ηw·X) + k·ηx·ηw
//                              + 2^-22 · (|cpu| + |bias|)
//             (≈ 1e-3 · S for the shapes here). That worst case alone would let a dropped term
//             through, so the normalised error Σ(cuda − cpu)² / Σ cpu² must also stay ≤ 1e-6: the
//             rounding errors are independent, so it is ≈ (u/√3)² · 2 ≈ 1.6e-7, whereas a missing
//             or doubled term of k gives ≈ 1/k ≥ 5e-4.
//   matmul with an f32 (vector) weight: |cuda − cpu| ≤ 3k · 2^-24 · S + 2^-22 · (|cpu| + |bias|).
//   matmul with a quantised weight, against the exact product (double sums of the CPU's
//             dequantised values): up to kQuantGemvMaxRows rows the GEMV multiplies the exact
//             weights by f32 x, so the f32-weight bound above; more rows go through f16 tiles,
//             so the f16 bound. Against the CPU backend (whose prompt kernels may round x to
//             16-bit blocks) the f16 bound, as for the f16 matrices.
// Outputs must hold no NaN/Inf where the reference is finite (and the same NaN/Inf where it is
// not, for the special-value cases). Every CUDA output sits between two guard rows that must
// come back untouched, and the op sees it as a row slice (a non-zero byte offset) — except in the
// attention tests held to the derived f16 bounds, whose kernel-level twins in
// tests/test-cuda-attention.cpp guard their outputs.
//
// Organisation: each op has a table of cases (rows of shapes and parameters, after the driver
// below) run through one driver, run_both(): it builds the inputs on both backends (on the GPU
// as guarded row slices), runs the op on each, checks the guard rows and that every input the op
// does not write comes back unchanged, and returns both results for the comparison with the
// op's tolerance above. In-place variants (rms_norm, layer_norm, gelu_erf, glu into gate, add of
// a tensor to itself) run through the same driver. Argument checks belong to Backend and are
// shared with the CPU: tests/test-backend-validation.cpp runs its misuse table on this backend
// too.
//
// Without a GPU (CI, build machines) each case says it is skipped and returns: doctest has no
// run-time skip. Only the device query and the factory's error run everywhere.
#ifdef RAGKV_HAVE_CUDA

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/util/error.h"
#include "core/format/fp16.h"
#include "core/format/gguf.h"
#include "core/format/quant.h"
#include "cuda/convert.cuh"
#include "cuda/cuda-backend.h"
#include "cuda/cuda-weight.h"
#include "cuda/f16-product-bound.h"
#include "cuda/quant-decode.cuh"
#include "cuda/quant-matmul.cuh"
#include "tests/attention-mass-f16-bound.h"
#include "tests/ffn-f16-products-bound.h"
#include "tests/gguf-matrix-tensor.h"
#include "tests/test-util.h"

namespace {

using ragkv::Backend;
using ragkv::DType;
using ragkv::GgmlType;
using ragkv::Tensor;
using ragkv::Weight;

constexpr float kTolF32 = 1e-5f;
constexpr float kTolF16 = 2e-3f;
constexpr float kGuard = 1234.f;  // exact in f16 too

bool gpu_missing() {
  if (ragkv::cuda_device_present()) return false;
  MESSAGE("skipped: no CUDA GPU is present on this machine");
  return true;
}

struct Backends {
  std::unique_ptr<Backend> cpu = ragkv::make_cpu_backend(1);
  std::unique_ptr<Backend> gpu = ragkv::make_cuda_backend(0);
};

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Values as stored in a tensor of dtype dt: f16 inputs are rounded once on the host, so both
// backends start from the same bits.
std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = ragkv::fp32_to_fp16(v[i]);
  return h;
}

std::vector<float> round_to(DType dt, std::vector<float> v) {
  if (dt == DType::f16)
    for (float& x : v) x = ragkv::fp16_to_fp32(ragkv::fp32_to_fp16(x));
  return v;
}

void upload_values(Backend& be, const Tensor& t, const std::vector<float>& v) {
  REQUIRE(static_cast<int64_t>(v.size()) == t.numel());
  if (t.dtype == DType::f16) be.upload(t, to_f16(v).data());
  else be.upload(t, v.data());
}

std::vector<float> download_values(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype == DType::f16) {
    std::vector<uint16_t> h(v.size());
    be.download(t, h.data());
    for (size_t i = 0; i < h.size(); ++i) v[i] = ragkv::fp16_to_fp32(h[i]);
  } else {
    be.download(t, v.data());
  }
  return v;
}

Tensor make_tensor(Backend& be, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
  Tensor t = be.alloc(dt, rows, cols);
  upload_values(be, t, v);
  return t;
}

// A tensor between two guard rows: ops see `view`; `all` includes the guards.
struct Guarded {
  Tensor all, view;
};

Guarded make_guarded(Backend& be, DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
  Guarded g;
  g.all = be.alloc(dt, rows + 2, cols);
  std::vector<float> host(static_cast<size_t>((rows + 2) * cols), kGuard);
  std::copy(v.begin(), v.end(), host.begin() + cols);
  upload_values(be, g.all, host);
  g.view = g.all.slice_rows(1, rows);
  return g;
}

// The view's values; checks that both guard rows are intact.
std::vector<float> read_guarded(Backend& be, const Guarded& g) {
  const std::vector<float> all = download_values(be, g.all);
  const int64_t cols = g.all.cols, rows = g.view.rows;
  int64_t touched = 0;
  for (int64_t j = 0; j < cols; ++j) {
    touched += all[j] != kGuard;
    touched += all[(rows + 1) * cols + j] != kGuard;
  }
  CHECK_MESSAGE(touched == 0, "the op wrote outside its output tensor");
  return {all.begin() + cols, all.begin() + (rows + 1) * cols};
}

// Element-wise comparison with |got − ref| ≤ tol · (1 + |ref|); NaN/Inf must match exactly.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, float tol,
                  bool ref_must_be_finite = true) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, nonfinite_got = 0, nonfinite_ref = 0, worst_at = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = ref[i], g = got[i];
    if (!std::isfinite(r)) {
      ++nonfinite_ref;
      const bool same = std::isnan(r) ? std::isnan(g) : g == r;
      bad += !same;
      continue;
    }
    if (!std::isfinite(g)) {
      ++nonfinite_got;
      continue;
    }
    const double err = std::fabs(double(g) - double(r)) / (1.0 + std::fabs(double(r)));
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
    bad += err > tol;
  }
  CAPTURE(worst);
  CAPTURE(worst_at);
  CAPTURE(tol);
  if (ref_must_be_finite) CHECK(nonfinite_ref == 0);
  CHECK(nonfinite_got == 0);
  CHECK(bad == 0);
}

// A hand-built F32 vector tensor, as load_weight would see it from a GGUF file.
ragkv::GgufTensor f32_vector(const std::string& name, const std::vector<float>& v) {
  ragkv::GgufTensor t;
  t.name = name;
  t.type = ragkv::GgmlType::F32;
  t.ne = {static_cast<int64_t>(v.size())};
  t.nbytes = v.size() * sizeof(float);
  t.data = reinterpret_cast<const uint8_t*>(v.data());
  return t;
}

const int64_t kRows[] = {1, 7, 33};
const int64_t kCols[] = {1, 64, 576, 1000, 1023, 1024, 2049};

// Every GGUF type the CPU backend dequantises (core/format/quant.h).
const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                 GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                 GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// The f16 fields of one quantised block (scale d, and offset m / dmin) and the range of values
// the tests put there; every other byte of a block may hold any bits.
struct ScaleField {
  size_t offset;
  float lo, hi;
};

std::vector<ScaleField> scale_fields(GgmlType t) {
  switch (t) {
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0: return {{0, 1e-3f, 4e-3f}};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: return {{0, 1e-3f, 4e-3f}, {2, -0.05f, 0.05f}};
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: return {{0, 1e-3f, 4e-3f}, {2, 1e-3f, 4e-3f}};
    case GgmlType::Q6_K: return {{208, 1e-3f, 4e-3f}};  // ql[128] qh[64] scales[16] d
    default: FAIL("no scale fields for type " << ragkv::ggml_type_name(t)); return {};
  }
}

// GGUF data of a [rows][cols] matrix of type t: float types hold values in [-1, 1]; quantised
// blocks hold random quants under small random f16 scales (values up to ~16 for Q6_K).
std::vector<uint8_t> random_matrix_bytes(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<uint8_t> bytes;
  if (t == GgmlType::F32) {
    bytes.resize(n * 4);
    for (size_t i = 0; i < n; ++i) {
      const float v = unit(rng);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
  } else if (t == GgmlType::F16 || t == GgmlType::BF16) {
    bytes.resize(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = t == GgmlType::F16 ? ragkv::fp32_to_fp16(unit(rng)) : ragkv::fp32_to_bf16(unit(rng));
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else {
    bytes.resize(ragkv::ggml_row_bytes(t, cols) * static_cast<size_t>(rows));
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    const size_t block = ragkv::ggml_block_bytes(t);
    for (size_t off = 0; off < bytes.size(); off += block)
      for (const ScaleField& f : scale_fields(t)) {
        const uint16_t h = ragkv::fp32_to_fp16(std::uniform_real_distribution<float>(f.lo, f.hi)(rng));
        std::memcpy(bytes.data() + off + f.offset, &h, 2);
      }
  }
  return bytes;
}

using ragkv::test::matrix_tensor;

ragkv::GgufTensor f32_matrix(const std::string& name, int64_t rows, int64_t cols,
                             const std::vector<float>& v) {
  ragkv::GgufTensor g = f32_vector(name, v);
  g.ne = {cols, rows};
  return g;
}

// The CPU's f32 values of a matrix (what its load_weight holds).
std::vector<float> dequantized(GgmlType t, int64_t rows, int64_t cols, const std::vector<uint8_t>& bytes) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  const size_t row_bytes = ragkv::ggml_row_bytes(t, cols);
  for (int64_t r = 0; r < rows; ++r)
    ragkv::dequantize_row(t, bytes.data() + r * row_bytes, v.data() + r * cols, cols);
  return v;
}

// What a matrix of type t reads back as on the device (cuda-backend.h, "Weight storage"): the
// CPU's values where the device keeps the type quantised (unless f16_policy), else those values
// rounded to f16.
std::vector<float> stored_values(GgmlType t, std::vector<float> cpu_values, bool f16_policy = false) {
  if (ragkv::quant_decode::device_decodable(t) && !f16_policy) return cpu_values;
  return round_to(DType::f16, std::move(cpu_values));
}

// y [n][out] = x · wᵀ (+ bias) summed in double: the exact product of the f32 operands, up to
// one rounding to f32.
std::vector<float> exact_matmul(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                                int64_t n, int64_t in, int64_t out) {
  std::vector<float> y(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < out; ++j) {
      double s = bias ? double((*bias)[j]) : 0.0;
      for (int64_t c = 0; c < in; ++c) s += double(x[i * in + c]) * double(w[j * in + c]);
      y[i * out + j] = float(s);
    }
  return y;
}

std::vector<int32_t> random_rows(size_t n, int64_t limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> rows(n);
  for (int32_t& r : rows) r = static_cast<int32_t>(rng() % static_cast<uint32_t>(limit));
  return rows;
}

// A random selection of n distinct rows of [0, limit), in random order (n ≤ limit).
std::vector<int32_t> distinct_rows(size_t n, int64_t limit, uint32_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(limit));
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(n);
  return all;
}

// The matmul error bounds of the header comment, per element of y [n][out], from the f32 inputs
// x [n][in], the CPU's weight values w [out][in], the bias and the CPU result.
std::vector<double> matmul_bounds(const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>* bias, const std::vector<float>& ref,
                                  int64_t n, int64_t in, int64_t out, bool f16_operands) {
  const double k = double(in);
  const double u32 = std::ldexp(1.0, -24);
  const double eta_w = f16_operands ? std::ldexp(1.0, -25) : 0.0;
  const double rel = f16_operands ? std::ldexp(1.0, -10) + std::ldexp(1.0, -22) + 3 * k * u32 : 3 * k * u32;
  std::vector<double> bound(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x.data() + i * in;
    double row_max = 0, x1 = 0;
    for (int64_t c = 0; c < in; ++c) {
      if (std::isfinite(xi[c])) row_max = std::max(row_max, double(std::fabs(xi[c])));
      x1 += std::fabs(double(xi[c]));
    }
    const double eta_x = f16_operands ? std::ldexp(1.0, -25) * std::max(1.0, row_max / 16384.0) : 0.0;
    for (int64_t j = 0; j < out; ++j) {
      const float* wj = w.data() + j * in;
      double sum_abs = 0, w1 = 0;
      for (int64_t c = 0; c < in; ++c) {
        sum_abs += std::fabs(double(xi[c]) * double(wj[c]));
        w1 += std::fabs(double(wj[c]));
      }
      const double b = bias ? std::fabs(double((*bias)[j])) : 0.0;
      bound[i * out + j] = 1.01 * (rel * sum_abs + eta_x * w1 + eta_w * x1) + k * eta_x * eta_w +
                           std::ldexp(1.0, -22) * (std::fabs(double(ref[i * out + j])) + b);
    }
  }
  return bound;
}

// |got − ref| ≤ bound element-wise (NaN/Inf must match where the reference is not finite), and
// Σ(got − ref)² / Σ ref² ≤ max_nmse over the finite elements when there are enough of them for
// the statistic to mean something.
void expect_within(const std::vector<float>& got, const std::vector<float>& ref,
                   const std::vector<double>& bound, double max_nmse) {
  REQUIRE(got.size() == ref.size());
  REQUIRE(bound.size() == ref.size());
  size_t bad = 0, nonfinite_got = 0, worst_at = 0, finite = 0;
  double worst = 0, err2 = 0, ref2 = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float r = ref[i], g = got[i];
    if (!std::isfinite(r)) {
      bad += std::isnan(r) ? !std::isnan(g) : g != r;
      continue;
    }
    if (!std::isfinite(g)) {
      ++nonfinite_got;
      continue;
    }
    const double err = std::fabs(double(g) - double(r));
    if (err / bound[i] > worst) {
      worst = err / bound[i];
      worst_at = i;
    }
    bad += err > bound[i];
    err2 += err * err;
    ref2 += double(r) * r;
    ++finite;
  }
  CAPTURE(worst);  // the largest error as a fraction of its bound
  CAPTURE(worst_at);
  CHECK(nonfinite_got == 0);
  CHECK(bad == 0);
  if (finite >= 100 && ref2 > 0) {
    const double nmse = err2 / ref2;
    CAPTURE(nmse);
    CHECK(nmse <= max_nmse);
  }
}

constexpr double kMatmulMaxNmse = 1e-6;

// Calls check(dt, rows, cols) for the storage cases of the memory ops (f32 and f16, odd sizes).
template <typename Check>
void for_each_storage_shape(Check check) {
  for (DType dt : {DType::f32, DType::f16}) {
    for (int64_t rows : kRows) {
      for (int64_t cols : {int64_t(1), int64_t(63), int64_t(1000)}) {
        CAPTURE(rows);
        CAPTURE(cols);
        check(dt, rows, cols);
      }
    }
  }
}


// ---- the driver: one op case on both backends

std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.f); }

// Equal element for element, NaN matching NaN (inputs of the special-value cases).
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

// A tensor argument of an op case: dtype, shape and the values it holds before the op (rounded
// to its dtype, so both backends start from the same bits). The op writes the `written` ones;
// every other argument must come back unchanged.
struct Arg {
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;
  std::vector<float> values;
  bool written = false;
};

Arg input(DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
  return {dt, rows, cols, round_to(dt, v), false};
}
Arg output(DType dt, int64_t rows, int64_t cols, const std::vector<float>& v) {
  return {dt, rows, cols, round_to(dt, v), true};
}

// The op under test on one backend, given its tensors in the order of the Args.
using OpCall = std::function<void(Backend&, const std::vector<Tensor>&)>;

// Every argument's values after the op, on each backend.
struct Results {
  std::vector<std::vector<float>> cpu, gpu;
};

// Runs `op` on the CPU backend over plain tensors and on the CUDA backend over guarded row slices
// (between two guard rows that must come back untouched, at a non-zero byte offset) holding the
// same values. Checks the guards and that the arguments the op does not write are unchanged on
// the GPU; returns every argument's values on both backends for the op's own comparison.
Results run_both(Backends& be, const std::vector<Arg>& args, const OpCall& op) {
  std::vector<Tensor> on_cpu, on_gpu;
  std::vector<Guarded> guarded;
  for (const Arg& a : args) {
    on_cpu.push_back(make_tensor(*be.cpu, a.dtype, a.rows, a.cols, a.values));
    guarded.push_back(make_guarded(*be.gpu, a.dtype, a.rows, a.cols, a.values));
    on_gpu.push_back(guarded.back().view);
  }
  op(*be.cpu, on_cpu);
  op(*be.gpu, on_gpu);
  Results r;
  for (size_t i = 0; i < args.size(); ++i) {
    CAPTURE(i);
    r.cpu.push_back(download_values(*be.cpu, on_cpu[i]));
    r.gpu.push_back(read_guarded(*be.gpu, guarded[i]));
    if (!args[i].written) CHECK_MESSAGE(same_values(r.gpu[i], args[i].values), "the op changed an input");
  }
  return r;
}

// An op y = f(x) that may run in place (rms_norm, layer_norm, gelu_erf), through run_both twice:
// out of place (x must come back unchanged) and in place (x and y the same tensor); both GPU
// results are compared with the CPU's out-of-place one.
using UnaryCall = std::function<void(Backend&, const Tensor& x, const Tensor& y)>;
void expect_close_both_ways(Backends& be, int64_t rows, int64_t cols, const std::vector<float>& x, float tol,
                            const UnaryCall& op, bool ref_must_be_finite = true) {
  const Results r = run_both(be, {input(DType::f32, rows, cols, x), output(DType::f32, rows, cols, zeros(x.size()))},
                             [&](Backend& b, const std::vector<Tensor>& t) { op(b, t[0], t[1]); });
  expect_close(r.gpu[1], r.cpu[1], tol, ref_must_be_finite);
  const Results in_place = run_both(be, {output(DType::f32, rows, cols, x)},
                                    [&](Backend& b, const std::vector<Tensor>& t) { op(b, t[0], t[0]); });
  expect_close(in_place.gpu[0], r.cpu[1], tol, ref_must_be_finite);
}

// One weight loaded on both backends; on(b) is the one backend b loaded.
struct WeightPair {
  std::unique_ptr<Weight> cpu, gpu;
  const Weight& on(const Backend& b) const { return cpu->owner() == &b ? *cpu : *gpu; }
};

WeightPair load_both(Backends& be, const ragkv::GgufTensor& t) {
  return {be.cpu->load_weight(t), be.gpu->load_weight(t)};
}

// ---- the tables: shapes and parameters of each op

// The shapes of the row-wise and element-wise ops: every row count of kRows with every column
// count of kCols (odd sizes, and both sides of the 1024-thread block switch).
struct Shape {
  int64_t rows, cols;
};
std::vector<Shape> row_shapes() {
  std::vector<Shape> s;
  for (int64_t rows : kRows)
    for (int64_t cols : kCols) s.push_back({rows, cols});
  return s;
}

// The row-wise norms: every shape with each eps.
struct NormCase {
  int64_t rows, cols;
  float eps;
};
std::vector<NormCase> norm_cases(std::initializer_list<float> eps_values) {
  std::vector<NormCase> c;
  for (const Shape& s : row_shapes())
    for (float eps : eps_values) c.push_back({s.rows, s.cols, eps});
  return c;
}

// rope: head layouts of the default models and the edge cases of the kernel, each run over kRows,
// f32 and f16 storage, forward and inverse.
struct RopeCase {
  const char* what;
  int n_heads, head_dim, n_rot;
  bool neox;
  float base, scale;
  bool factors;
};
const RopeCase kRopeCases[] = {
    {"SmolLM2 q: 9 heads of 64", 9, 64, 64, false, 100000.f, 1.f, false},
    {"kv: 3 heads of 64", 3, 64, 64, false, 10000.f, 1.f, false},
    {"gemma3 global: NeoX, 4 heads of 256, scale 1/8", 4, 256, 256, true, 1000000.f, 0.125f, false},
    {"llama3: freq factors, 8 heads of 128", 8, 128, 128, false, 500000.f, 1.f, true},
    {"partial rotation: 32 of 80", 5, 80, 32, false, 10000.f, 1.f, false},
    {"partial rotation NeoX: 32 of 80", 5, 80, 32, true, 10000.f, 1.f, false},
    {"NeoX, odd head count, factors, scale 1/2", 7, 96, 64, true, 10000.f, 0.5f, true},
};

// The element-wise ops with two inputs.
enum class Elementwise : uint8_t { swiglu, geglu, add };
const char* elementwise_name(Elementwise op) {
  return op == Elementwise::swiglu ? "swiglu" : op == Elementwise::geglu ? "geglu" : "add";
}
// swiglu / geglu: out = f(gate) ⊙ up.
void run_glu(Backend& b, Elementwise op, const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (op == Elementwise::geglu) b.geglu(gate, up, out);
  else b.swiglu(gate, up, out);
}

// embed: tables of a few to many rows, ids of one token to a prefill batch, scales of the models
// (1, Gemma's √d-like 24) and an inexact one.
const int64_t kVocabs[] = {2, 33, 1000};
const size_t kIdCounts[] = {1, 7, 300};
const float kEmbedScales[] = {1.f, 24.f, 0.3f};

// matmul with a matrix weight (quantised or f16 on the GPU).
struct MatmulCase {
  GgmlType type;
  int64_t n, in, out;
  bool bias;
  float x_range;  // x uniform in [-x_range, x_range]
};
std::vector<MatmulCase> matmul_cases() {
  // In: on both sides of the operand conversion's warp / block switch (1024). Out: on both sides
  // of the epilogue's 1024-column chunks. n: one token (decode) to a prefill batch.
  const int64_t shapes[][3] = {{1, 64, 3},      {7, 576, 64},    {33, 1000, 577}, {67, 1023, 130},
                               {5, 1024, 1025}, {2, 2049, 2050}, {67, 32, 1100},  {300, 576, 192}};
  std::vector<MatmulCase> c;
  for (const auto& s : shapes)
    for (bool bias : {false, true}) c.push_back({GgmlType::F32, s[0], s[1], s[2], bias, 2.f});
  // Every type at 7 rows; the quantised ones also at the GEMV's last row count and the first
  // that goes through the dequantised tiles instead.
  for (GgmlType type : kWeightTypes) c.push_back({type, 7, 512, 96, true, 2.f});
  for (GgmlType type : kWeightTypes)
    if (ragkv::quant_decode::device_decodable(type))
      for (int64_t n : {ragkv::kQuantGemvMaxRows, ragkv::kQuantGemvMaxRows + 1}) c.push_back({type, n, 512, 96, true, 2.f});
  c.push_back({GgmlType::Q4_K, 67, 2304, 260, false, 2.f});
  // Large activations (still inside f16) and tiny ones (f16 subnormals).
  c.push_back({GgmlType::F32, 7, 576, 64, true, 3e4f});
  c.push_back({GgmlType::F32, 7, 576, 64, false, 1e-5f});
  return c;
}

// matmul with a vector weight (one output, f32 on the GPU): n rows × in features.
const int64_t kVectorMatmulRows[] = {1, 7, 300};
const int64_t kVectorMatmulIn[] = {64, 2049};

// gather_rows / scatter_rows: row counts around one block and many rows, columns of kCols.
const size_t kRowCounts[] = {1, 7, 300};
// row_sq_dist: n around the 8 rows of one warp-per-row block, and many rows.
const int64_t kSqDistRows[] = {1, 8, 9, 300};

// CudaBackend::attention: the selective-recompute layout (a few query rows at scattered
// positions over KV rows whose positions are not sorted), without and with a sliding window.
const int kAttentionWindows[] = {0, 96};

}  // namespace

TEST_CASE("cuda: device query never throws, and the factory fails cleanly without a device") {
  bool present = false;
  CHECK_NOTHROW(present = ragkv::cuda_device_present());
  if (!present) {
    MESSAGE("no CUDA GPU is present: checking only that make_cuda_backend fails with ragkv::Error");
    CHECK_THROWS_AS(ragkv::make_cuda_backend(0), ragkv::Error);
    return;
  }
  auto gpu = ragkv::make_cuda_backend(0);
  CHECK(gpu->kind() == ragkv::DeviceKind::cuda);
  CHECK(gpu->name().rfind("cuda:0", 0) == 0);
  CHECK_THROWS_AS(ragkv::make_cuda_backend(-1), ragkv::Error);
  CHECK_THROWS_AS(ragkv::make_cuda_backend(1 << 20), ragkv::Error);
}

TEST_CASE("cuda: upload, download and fill_zero keep to the tensor") {
  if (gpu_missing()) return;
  Backends be;
  for_each_storage_shape([&](DType dt, int64_t rows, int64_t cols) {
    const auto v = round_to(dt, random_values(size_t(rows * cols), 11));
    Guarded g = make_guarded(*be.gpu, dt, rows, cols, v);
    CHECK(read_guarded(*be.gpu, g) == v);
    be.gpu->fill_zero(g.view);
    CHECK(read_guarded(*be.gpu, g) == std::vector<float>(v.size(), 0.f));
  });
}

TEST_CASE("cuda: copy between device tensors is exact and keeps to the rows") {
  if (gpu_missing()) return;
  Backends be;
  for_each_storage_shape([&](DType dt, int64_t rows, int64_t cols) {
    const auto v = round_to(dt, random_values(size_t(rows * cols), 12));
    Tensor src = be.gpu->alloc(dt, rows + 1, cols).slice_rows(1, rows);  // a non-zero offset
    upload_values(*be.gpu, src, v);
    Guarded g = make_guarded(*be.gpu, dt, rows, cols, std::vector<float>(v.size(), 0.f));
    be.gpu->copy(src, g.view);
    CHECK(read_guarded(*be.gpu, g) == v);
  });
  Tensor a = be.gpu->alloc(DType::f16, 4, 8), b = be.gpu->alloc(DType::f32, 4, 8);
  CHECK_THROWS_AS(be.gpu->copy(a, b), ragkv::Error);
  CHECK_THROWS_AS(be.gpu->copy(a.slice_rows(0, 2), a.slice_rows(1, 2)), ragkv::Error);
}

// upload_async (layer-wise KV loading): many copies in flight on the copy stream, the host
// buffer overwritten as soon as each call returns, then ops after wait_uploads() see every row —
// also rows a queued op was still reading (the copy waits for earlier compute).
TEST_CASE("cuda: upload_async copies land before the ops queued after wait_uploads") {
  if (gpu_missing()) return;
  Backends be;
  const int64_t rows = 600, cols = 192, parts = 8;
  Tensor dst = be.gpu->alloc(DType::f32, rows * parts, cols);
  Tensor last = be.gpu->alloc(DType::f32, rows, cols);
  std::vector<int32_t> idx(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) idx[size_t(i)] = int32_t((parts - 1) * rows + i);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    std::vector<float> host, expect;
    for (int64_t part = 0; part < parts; ++part) {
      host = random_values(size_t(rows * cols), uint32_t(100 + round * parts + part));
      if (part == parts - 1) expect = host;
      be.gpu->upload_async(dst.slice_rows(part * rows, rows), host.data());
      std::fill(host.begin(), host.end(), std::numeric_limits<float>::quiet_NaN());  // must not reach the device
    }
    be.gpu->wait_uploads();
    be.gpu->gather_rows(dst, last, idx);  // queued after the wait; rewritten next round while queued work may read dst
    CHECK(download_values(*be.gpu, last) == expect);
  }
}

// Pinned host memory (the host tier's, Backend::pin_host_memory): copied straight from it by DMA;
// ranges inside it and a copy that runs past its end (staged) both land; unpinning waits for
// the copies that read it.
TEST_CASE("cuda: upload_async from memory given to pin_host_memory lands, and unpinning waits for it") {
  if (gpu_missing()) return;
  Backends be;
  const int64_t rows = 512, cols = 256, parts = 4;
  std::vector<float> host = random_values(size_t(rows * cols * parts), 7);
  // Pinned: all but the last part, so that one upload starts inside the range and ends past it.
  be.gpu->pin_host_memory(host.data(), size_t(rows * cols * (parts - 1)) * sizeof(float));
  Tensor dst = be.gpu->alloc(DType::f32, rows * parts, cols);
  for (int64_t part = 0; part < parts; ++part)
    be.gpu->upload_async(dst.slice_rows(part * rows, rows), host.data() + part * rows * cols);
  const int64_t straddle = rows / 2;  // rows [2.5 parts, 3.5 parts): crosses the range's end
  Tensor tail = be.gpu->alloc(DType::f32, rows, cols);
  be.gpu->upload_async(tail, host.data() + ((parts - 1) * rows - straddle) * cols);
  be.gpu->wait_uploads();
  CHECK(download_values(*be.gpu, dst) == host);
  const std::vector<float> tail_expect(host.begin() + ((parts - 1) * rows - straddle) * cols,
                                       host.begin() + ((parts - 1) * rows - straddle + rows) * cols);
  CHECK(download_values(*be.gpu, tail) == tail_expect);
  be.gpu->upload_async(dst.slice_rows(0, rows), host.data());
  be.gpu->unpin_host_memory(host.data());  // waits for that copy
  be.gpu->unpin_host_memory(host.data());  // no longer pinned: nothing
  be.gpu->wait_uploads();
  CHECK(download_values(*be.gpu, dst) == host);
}

// The fused residual add and norm: bit for bit add then rms_norm on the GPU, and within the f32
// tolerance of the CPU (which runs the two ops).
TEST_CASE("cuda: add_rms_norm equals add then rms_norm on the GPU bit for bit, and the CPU within tolerance") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 300;
  for (const NormCase& c : norm_cases({1e-6f})) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    const auto x = random_values(size_t(c.rows * c.cols), ++seed), y = random_values(size_t(c.rows * c.cols), ++seed);
    const WeightPair w = load_both(be, f32_vector("blk.0.ffn_norm.weight", random_values(size_t(c.cols), ++seed)));
    // Fused on the GPU and on the CPU, then the two ops on the GPU.
    Tensor gx = make_tensor(*be.gpu, DType::f32, c.rows, c.cols, x), gy = make_tensor(*be.gpu, DType::f32, c.rows, c.cols, y);
    Tensor gn = be.gpu->alloc(DType::f32, c.rows, c.cols);
    be.gpu->add_rms_norm(gx, gy, w.on(*be.gpu), c.eps, gn);
    Tensor cx = make_tensor(*be.cpu, DType::f32, c.rows, c.cols, x), cy = make_tensor(*be.cpu, DType::f32, c.rows, c.cols, y);
    Tensor cn = be.cpu->alloc(DType::f32, c.rows, c.cols);
    be.cpu->add_rms_norm(cx, cy, w.on(*be.cpu), c.eps, cn);
    Tensor sx = make_tensor(*be.gpu, DType::f32, c.rows, c.cols, x), sy = make_tensor(*be.gpu, DType::f32, c.rows, c.cols, y);
    Tensor sn = be.gpu->alloc(DType::f32, c.rows, c.cols);
    be.gpu->add(sx, sy);
    be.gpu->rms_norm(sx, w.on(*be.gpu), c.eps, sn);
    CHECK(download_values(*be.gpu, gx) == download_values(*be.gpu, sx));
    CHECK(download_values(*be.gpu, gn) == download_values(*be.gpu, sn));
    const std::vector<float> got = download_values(*be.gpu, gn), ref = download_values(*be.cpu, cn);
    for (size_t i = 0; i < ref.size(); ++i) REQUIRE(std::fabs(got[i] - ref[i]) <= kTolF32 * (1.f + std::fabs(ref[i])));
    // In place (xn = x).
    Tensor ix = make_tensor(*be.gpu, DType::f32, c.rows, c.cols, x);
    be.gpu->add_rms_norm(ix, gy, w.on(*be.gpu), c.eps, ix);
    CHECK(download_values(*be.gpu, ix) == got);
  }
}

namespace {

// A stack of parts with random values (types[p], rows[p] rows of `in` values): their GGUF bytes
// and tensors, kept beside the stack loaded on a backend (a part may be loaded alone too).
struct RandomStack {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ragkv::GgufTensor> tensors;
  std::unique_ptr<Weight> weight;
};
RandomStack random_stack(Backend& b, const std::vector<GgmlType>& types, const std::vector<int64_t>& rows, int64_t in,
                         uint32_t& seed, const std::string& name) {
  RandomStack s;
  for (size_t p = 0; p < types.size(); ++p) s.bytes.push_back(random_matrix_bytes(types[p], rows[p], in, ++seed));
  for (size_t p = 0; p < types.size(); ++p)
    s.tensors.push_back(matrix_tensor("blk.0.part" + std::to_string(p) + ".weight", types[p], rows[p], in, s.bytes[p]));
  std::vector<const ragkv::GgufTensor*> parts;
  for (const auto& t : s.tensors) parts.push_back(&t);
  s.weight = b.load_weight_stack(parts, name);
  return s;
}

// A layer's FFN weights of one type with random values: their GGUF bytes and the gate/up stack and
// down projection loaded on a backend, as a model loads them.
struct FfnCase {
  GgmlType type;
  int64_t in, ff, n;
};
struct RandomFfn {
  std::vector<uint8_t> gate_bytes, up_bytes, down_bytes;
  std::unique_ptr<Weight> gate_up, down;
};
RandomFfn random_ffn(Backend& b, const FfnCase& c, uint32_t& seed) {
  RandomFfn f;
  f.gate_bytes = random_matrix_bytes(c.type, c.ff, c.in, ++seed);
  f.up_bytes = random_matrix_bytes(c.type, c.ff, c.in, ++seed);
  f.down_bytes = random_matrix_bytes(c.type, c.in, c.ff, ++seed);
  const ragkv::GgufTensor tg = matrix_tensor("blk.0.ffn_gate.weight", c.type, c.ff, c.in, f.gate_bytes);
  const ragkv::GgufTensor tu = matrix_tensor("blk.0.ffn_up.weight", c.type, c.ff, c.in, f.up_bytes);
  const ragkv::GgufTensor* parts[] = {&tg, &tu};
  f.gate_up = b.load_weight_stack(parts, "blk.0.ffn_gate_up");
  f.down = b.load_weight(matrix_tensor("blk.0.ffn_down.weight", c.type, c.in, c.ff, f.down_bytes));
  return f;
}

}  // namespace

// add_rms_norm told the decode product that reads xn next (NextProduct) quantises xn for it as it
// writes it (cuda/rms-norm.cu's add_rms_norm_q8), and the product takes those blocks instead of
// quantising xn again: x, xn and the product must be the unhinted ops' bit for bit — 32- and
// 256-value blocks, the one-warp and 256-thread norms (rows under and over 1,024 values), 1 to 8
// rows, xn in place, a stack (QKV-like, a Q6_K part after Q4_K ones), and glu_ffn's gate/up product.
// The blocks must be used where they apply, and never after an op that may have changed xn, by
// another weight's product, or where a stack's parts read both block sizes (9 rows: no blocks, the
// prefill GEMM's f16 operand instead, the next test's).
TEST_CASE("cuda: add_rms_norm with the next product named prepares that product's operand, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  const auto& cuda = static_cast<const ragkv::CudaBackend&>(*be.gpu);
  const auto block8 = ragkv::Activations::block8;
  uint32_t seed = 5100;
  struct Case {
    std::vector<GgmlType> parts;
    int64_t in, n;
    bool fused;  // one block size: the prepared blocks apply (or, past 8 rows, the f16 operand)
  };
  const Case cases[] = {{{GgmlType::Q4_K}, 256, 1, true},           {{GgmlType::Q4_K}, 2048, 3, true},
                        {{GgmlType::Q4_0}, 256, 8, true},           {{GgmlType::Q8_0}, 1024, 2, true},
                        {{GgmlType::Q6_K}, 512, 5, true},           {{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K}, 1024, 1, true},
                        {{GgmlType::Q4_0, GgmlType::Q4_K}, 256, 2, false}, {{GgmlType::Q4_K}, 256, 9, true}};
  for (const Case& c : cases) {
    CAPTURE(c.in);
    CAPTURE(c.n);
    CAPTURE(c.parts.size());
    const std::string first_type = ragkv::ggml_type_name(c.parts[0]);
    CAPTURE(first_type);
    const auto x = random_values(size_t(c.n * c.in), ++seed), y = random_values(size_t(c.n * c.in), ++seed);
    const auto norm_values = random_values(size_t(c.in), ++seed);
    const std::unique_ptr<Weight> norm = be.gpu->load_weight(f32_vector("blk.0.attn_norm.weight", norm_values));
    const int64_t rows = 96;
    const RandomStack stack = random_stack(*be.gpu, c.parts, std::vector<int64_t>(c.parts.size(), rows), c.in, seed,
                                           "blk.0.stack");
    const std::unique_ptr<Weight>& w = stack.weight;
    const auto other_bytes = random_matrix_bytes(c.parts[0], rows, c.in, ++seed);
    const std::unique_ptr<Weight> other =
        be.gpu->load_weight(matrix_tensor("blk.0.other.weight", c.parts[0], rows, c.in, other_bytes));
    // between(xn): an op run between the norm and the product (none, or one that changes xn).
    const auto run = [&](bool hint, bool in_place, const Weight& product,
                         const std::function<void(const Tensor&)>& between) {
      Tensor tx = make_tensor(*be.gpu, DType::f32, c.n, c.in, x), ty = make_tensor(*be.gpu, DType::f32, c.n, c.in, y);
      Tensor tn = in_place ? tx : be.gpu->alloc(DType::f32, c.n, c.in);
      Tensor ty_out = be.gpu->alloc(DType::f32, c.n, product.out_features);
      be.gpu->add_rms_norm(tx, ty, *norm, 1e-5f, tn, hint ? ragkv::NextProduct{w.get(), block8} : ragkv::NextProduct{});
      if (between) between(tn);
      be.gpu->matmul(tn, product, ty_out, nullptr, block8);
      return std::vector<std::vector<float>>{download_values(*be.gpu, tx), download_values(*be.gpu, tn),
                                             download_values(*be.gpu, ty_out)};
    };
    const std::function<void(const Tensor&)> none;
    for (const bool in_place : {false, true}) {
      CAPTURE(in_place);
      const int64_t used = cuda.prepared_operands_used();
      const auto hinted = run(true, in_place, *w, none);
      CHECK(cuda.prepared_operands_used() - used == (c.fused ? 1 : 0));
      const auto plain = run(false, in_place, *w, none);
      CHECK(hinted == plain);
    }
    // An op between them that changes xn: the product quantises xn again.
    const auto doubled = [&](const Tensor& tn) { be.gpu->add(tn, tn); };
    const int64_t used = cuda.prepared_operands_used();
    const auto changed = run(true, false, *w, doubled);
    CHECK(changed == run(false, false, *w, doubled));
    // Another weight's product (the same shape): not its operand.
    const auto elsewhere = run(true, false, *other, none);
    CHECK(elsewhere == run(false, false, *other, none));
    CHECK(cuda.prepared_operands_used() == used);
  }
  // glu_ffn's gate/up product takes the blocks prepared for the stack — past 8 rows (a prefill), the
  // f16 operand scaled for its f16 products, where the hint says gated (the next test's).
  for (const FfnCase& c : {FfnCase{GgmlType::Q4_K, 256, 768, 1}, FfnCase{GgmlType::Q8_0, 256, 512, 4},
                           FfnCase{GgmlType::F16, 1024, 2048, 40}, FfnCase{GgmlType::Q4_K, 512, 1536, 24}}) {
    const std::string type_name = ragkv::ggml_type_name(c.type);
    CAPTURE(type_name);
    const RandomFfn f = random_ffn(*be.gpu, c, seed);
    const auto x = random_values(size_t(c.n * c.in), ++seed), y = random_values(size_t(c.n * c.in), ++seed);
    const std::unique_ptr<Weight> norm =
        be.gpu->load_weight(f32_vector("blk.0.ffn_norm.weight", random_values(size_t(c.in), ++seed)));
    const auto run = [&](bool hint, bool gated) {
      Tensor tx = make_tensor(*be.gpu, DType::f32, c.n, c.in, x), ty = make_tensor(*be.gpu, DType::f32, c.n, c.in, y);
      Tensor tn = be.gpu->alloc(DType::f32, c.n, c.in), proj = be.gpu->alloc(DType::f32, c.n, c.in);
      Tensor gate = be.gpu->alloc(DType::f32, c.n, c.ff), up = be.gpu->alloc(DType::f32, c.n, c.ff);
      be.gpu->add_rms_norm(tx, ty, *norm, 1e-5f, tn,
                           hint ? ragkv::NextProduct{f.gate_up.get(), block8, gated} : ragkv::NextProduct{});
      be.gpu->glu_ffn(tn, *f.gate_up, *f.down, gate, up, proj, false, block8);
      return std::vector<std::vector<float>>{download_values(*be.gpu, tx), download_values(*be.gpu, tn),
                                             download_values(*be.gpu, proj)};
    };
    const int64_t used = cuda.prepared_operands_used();
    const auto hinted = run(true, true);
    CHECK(cuda.prepared_operands_used() - used == 1);
    const auto plain = run(false, false);
    CHECK(hinted == plain);
    CHECK(run(true, false) == plain);  // past 8 rows an operand scaled for another product: converted again
  }
}

// add_rms_norm told the prefill GEMM that reads xn next (more rows than a GEMV takes) writes xn's
// row-scaled f16 operand as well (rms-norm.cu's add_rms_norm_f16_cuda), and the GEMM takes it
// instead of converting xn again: x, xn and the product bit for bit the unhinted ops' — f16 and
// Q4_K weights, the one-warp and 256-thread norms, rows scaled up (tiny values) and down (beyond
// f16), a stack's parts into their outputs (glu_ffn's gate/up operand, scaled for its f16 products
// where the hint says so — NextProduct::gated —, is the previous test's). Not taken after an op that
// changes xn, or by another weight's product.
TEST_CASE("cuda: add_rms_norm before a prefill GEMM makes its f16 operand, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  const auto& cuda = static_cast<const ragkv::CudaBackend&>(*be.gpu);
  const auto block8 = ragkv::Activations::block8;
  uint32_t seed = 8100;
  const int64_t n = 40, rows = 96;
  for (const GgmlType type : {GgmlType::F16, GgmlType::Q4_K})
    for (const int64_t in : {int64_t(512), int64_t(1024)})
      for (const float norm_scale : {1.f, 1e-4f, 3e5f}) {
        const std::string type_name = ragkv::ggml_type_name(type);
        CAPTURE(type_name);
        CAPTURE(in);
        CAPTURE(norm_scale);
        const auto x = random_values(size_t(n * in), ++seed), y = random_values(size_t(n * in), ++seed);
        auto norm_values = random_values(size_t(in), ++seed);
        for (float& v : norm_values) v *= norm_scale;
        const std::unique_ptr<Weight> norm = be.gpu->load_weight(f32_vector("blk.0.ffn_norm.weight", norm_values));
        const RandomStack parts = random_stack(*be.gpu, {type, type, type}, {rows, rows, rows}, in, seed, "blk.0.stack");
        const std::unique_ptr<Weight>& stack = parts.weight;
        const std::unique_ptr<Weight> single = be.gpu->load_weight(parts.tensors[0]);
        // between(xn): an op between the norm and the product (none, or one that changes xn).
        const auto run = [&](bool hint, const Weight& product, const Weight& named,
                             const std::function<void(const Tensor&)>& between) {
          Tensor tx = make_tensor(*be.gpu, DType::f32, n, in, x), ty = make_tensor(*be.gpu, DType::f32, n, in, y);
          Tensor tn = be.gpu->alloc(DType::f32, n, in);
          be.gpu->add_rms_norm(tx, ty, *norm, 1e-5f, tn, hint ? ragkv::NextProduct{&named, block8} : ragkv::NextProduct{});
          if (between) between(tn);
          std::vector<Tensor> outs;
          for (const int64_t r : product.part_rows) outs.push_back(be.gpu->alloc(DType::f32, n, r));
          if (outs.size() == 1) be.gpu->matmul(tn, product, outs[0], nullptr, block8);
          else be.gpu->matmul_parts(tn, product, outs, {}, block8);
          std::vector<std::vector<float>> got{download_values(*be.gpu, tx), download_values(*be.gpu, tn)};
          for (const Tensor& o : outs) got.push_back(download_values(*be.gpu, o));
          return got;
        };
        const std::function<void(const Tensor&)> none;
        for (const Weight* w : {single.get(), stack.get()}) {
          const int64_t used = cuda.prepared_operands_used();
          const auto hinted = run(true, *w, *w, none);
          CHECK(cuda.prepared_operands_used() - used == 1);
          CHECK(hinted == run(false, *w, *w, none));
        }
        const int64_t used = cuda.prepared_operands_used();
        const auto doubled = [&](const Tensor& tn) { be.gpu->add(tn, tn); };
        CHECK(run(true, *single, *single, doubled) == run(false, *single, *single, doubled));
        CHECK(run(true, *single, *stack, none) == run(false, *single, *stack, none));  // another weight's
        CHECK(cuda.prepared_operands_used() == used);
      }
}

// The prefill FFN in one pass over its intermediate, and a decode step's GLU quantised on the way
// into the down projection's 8-bit blocks (cuda/cuda-ffn.cpp): bit for bit the three ops they
// replace, f16, Q4_K and Q8_0 weights (both activation block sizes), SwiGLU and GeGLU, f32 and
// block8 activations, the two narrower widths of the fused prefill kernel, rows scaled past f16's
// range —
// with the gate/up products kept in f32 (RAGKV_CUDA_FFN_PRODUCTS=f32; the default's f16 products
// are held to their derived bound in the next case).
TEST_CASE("cuda: glu_ffn with f32 products equals matmul_parts, swiglu or geglu, then matmul, bit for bit") {
  if (gpu_missing()) return;
  const ragkv::test::ScopedEnv products("RAGKV_CUDA_FFN_PRODUCTS", "f32");
  Backends be;
  CHECK(be.gpu->kernels().find("+f32-ffn-products") != std::string::npos);
  uint32_t seed = 4400;
  const FfnCase cases[] = {{GgmlType::F16, 256, 768, 40}, {GgmlType::F16, 256, 4608, 9}, {GgmlType::Q4_K, 256, 768, 17},
                           {GgmlType::Q4_K, 512, 4608, 12}, {GgmlType::F16, 256, 768, 3}, {GgmlType::Q4_K, 256, 768, 1},
                           {GgmlType::Q4_K, 512, 1536, 4}, {GgmlType::Q8_0, 256, 768, 2}, {GgmlType::Q8_0, 256, 768, 8},
                           {GgmlType::F16, 256, 768, 1},   {GgmlType::F16, 512, 1536, 2}};
  for (const FfnCase& c : cases) {
    const std::string type_name = ragkv::ggml_type_name(c.type);
    CAPTURE(type_name);
    CAPTURE(c.ff);
    CAPTURE(c.n);
    const RandomFfn w = random_ffn(*be.gpu, c, seed);
    const Weight &gate_up = *w.gate_up, &down = *w.down;
    auto x = random_values(size_t(c.n * c.in), ++seed);
    for (int64_t j = 0; j < c.in; ++j) x[size_t(j)] *= 3e4f;  // row 0: GLU values beyond 65504
    const Tensor gx = make_tensor(*be.gpu, DType::f32, c.n, c.in, x);
    for (const auto& [gelu, act] : {std::pair(false, ragkv::Activations::f32), std::pair(true, ragkv::Activations::f32),
                                   std::pair(false, ragkv::Activations::block8),
                                   std::pair(true, ragkv::Activations::block8)}) {
      CAPTURE(gelu);
      CAPTURE(int(act));
      const Tensor g1 = be.gpu->alloc(DType::f32, c.n, c.ff), u1 = be.gpu->alloc(DType::f32, c.n, c.ff);
      const Tensor p1 = be.gpu->alloc(DType::f32, c.n, c.in);
      be.gpu->glu_ffn(gx, gate_up, down, g1, u1, p1, gelu, act);
      const Tensor g2 = be.gpu->alloc(DType::f32, c.n, c.ff), u2 = be.gpu->alloc(DType::f32, c.n, c.ff);
      const Tensor p2 = be.gpu->alloc(DType::f32, c.n, c.in);
      const Tensor gu[2] = {g2, u2};
      be.gpu->matmul_parts(gx, gate_up, gu, {}, act);
      if (gelu) be.gpu->geglu(g2, u2, g2);
      else be.gpu->swiglu(g2, u2, g2);
      be.gpu->matmul(g2, down, p2, nullptr, act);
      const std::vector<float> fused = download_values(*be.gpu, p1), ops = download_values(*be.gpu, p2);
      CHECK(std::memcmp(fused.data(), ops.data(), fused.size() * sizeof(float)) == 0);
      bool finite = true;
      for (float v : fused) finite = finite && std::isfinite(v);
      CHECK(finite);
    }
  }
}

// A decode step's gate/up GEMV on a quantised stack of one type quantises the GLU for the down
// projection itself, the last block of each activation block's values doing it
// (int8_gemv_glu_q8_cuda): bit for bit matmul_parts, swiglu or geglu, then matmul on 8-bit blocks —
// Q4_K, Q5_K, Q6_K and Q8_0 stacks, the Q4_K_M mix's Q6_K down projection, 1 to 8 rows, xn's
// blocks prepared by the norm before it, a second call on other inputs (the first must leave its
// counters zero, or the second's blocks would not be quantised). A down projection on blocks of
// another size, and RAGKV_CUDA_GEMV_STORES=separate, take the unfused path.
TEST_CASE("cuda: glu_ffn's quantising gate/up GEMV equals the unfused ops on 8-bit blocks, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  const auto& cuda = static_cast<const ragkv::CudaBackend&>(*be.gpu);
  const auto block8 = ragkv::Activations::block8;
  uint32_t seed = 7700;
  struct Case {
    GgmlType gate_up, down;
    int64_t in, ff;
    bool fused;
  };
  const Case cases[] = {{GgmlType::Q4_K, GgmlType::Q6_K, 512, 1536, true},
                        {GgmlType::Q4_K, GgmlType::Q4_K, 256, 768, true},
                        {GgmlType::Q5_K, GgmlType::Q6_K, 256, 512, true},
                        {GgmlType::Q6_K, GgmlType::Q6_K, 256, 256, true},
                        {GgmlType::Q8_0, GgmlType::Q8_0, 256, 96, true},
                        {GgmlType::Q8_0, GgmlType::Q4_K, 256, 512, false}};
  for (const Case& c : cases) {
    const std::string type_name =
        ragkv::ggml_type_name(c.gate_up) + std::string("/") + ragkv::ggml_type_name(c.down);
    CAPTURE(type_name);
    const auto gate_bytes = random_matrix_bytes(c.gate_up, c.ff, c.in, ++seed);
    const auto up_bytes = random_matrix_bytes(c.gate_up, c.ff, c.in, ++seed);
    const auto down_bytes = random_matrix_bytes(c.down, c.in, c.ff, ++seed);
    const ragkv::GgufTensor tg = matrix_tensor("blk.0.ffn_gate.weight", c.gate_up, c.ff, c.in, gate_bytes);
    const ragkv::GgufTensor tu = matrix_tensor("blk.0.ffn_up.weight", c.gate_up, c.ff, c.in, up_bytes);
    const ragkv::GgufTensor* parts[] = {&tg, &tu};
    const std::unique_ptr<Weight> gate_up = be.gpu->load_weight_stack(parts, "blk.0.ffn_gate_up");
    const std::unique_ptr<Weight> down =
        be.gpu->load_weight(matrix_tensor("blk.0.ffn_down.weight", c.down, c.in, c.ff, down_bytes));
    const std::unique_ptr<Weight> norm =
        be.gpu->load_weight(f32_vector("blk.0.ffn_norm.weight", random_values(size_t(c.in), ++seed)));
    for (const int64_t n : {int64_t(1), int64_t(3), int64_t(8)}) {
      const auto x = random_values(size_t(n * c.in), ++seed), y = random_values(size_t(n * c.in), ++seed);
      for (const bool gelu : {false, true})
        for (const bool prepare : {false, true}) {
          CAPTURE(n);
          CAPTURE(gelu);
          CAPTURE(prepare);
          const auto run = [&](bool fused, const std::vector<float>& in0, const std::vector<float>& in1) {
            Tensor xn = be.gpu->alloc(DType::f32, n, c.in);
            if (prepare) {
              Tensor tx = make_tensor(*be.gpu, DType::f32, n, c.in, in0);
              Tensor ty = make_tensor(*be.gpu, DType::f32, n, c.in, in1);
              be.gpu->add_rms_norm(tx, ty, *norm, 1e-5f, xn, ragkv::NextProduct{gate_up.get(), block8});
            } else {
              upload_values(*be.gpu, xn, in0);
            }
            const Tensor g = be.gpu->alloc(DType::f32, n, c.ff), u = be.gpu->alloc(DType::f32, n, c.ff);
            const Tensor proj = be.gpu->alloc(DType::f32, n, c.in);
            if (fused) {
              be.gpu->glu_ffn(xn, *gate_up, *down, g, u, proj, gelu, block8);
            } else {
              const Tensor gu[2] = {g, u};
              be.gpu->matmul_parts(xn, *gate_up, gu, {}, block8);
              if (gelu) be.gpu->geglu(g, u, g);
              else be.gpu->swiglu(g, u, g);
              be.gpu->matmul(g, *down, proj, nullptr, block8);
            }
            return download_values(*be.gpu, proj);
          };
          const int64_t before = cuda.glu_q8_fused();
          const auto first = run(true, x, y), second = run(true, y, x);
          CHECK(cuda.glu_q8_fused() - before == (c.fused ? 2 : 0));
          const auto ops_first = run(false, x, y), ops_second = run(false, y, x);
          CHECK(std::memcmp(first.data(), ops_first.data(), ops_first.size() * sizeof(float)) == 0);
          CHECK(std::memcmp(second.data(), ops_second.data(), ops_second.size() * sizeof(float)) == 0);
          CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) != 0);  // other inputs
        }
    }
  }
  // The switch back to the two launches.
  const ragkv::test::ScopedEnv separate("RAGKV_CUDA_GEMV_STORES", "separate");
  const std::unique_ptr<Backend> unfused = ragkv::make_cuda_backend(0);
  CHECK(unfused->kernels().find("+separate-gemv-stores") != std::string::npos);
  const FfnCase c{GgmlType::Q4_K, 256, 768, 2};
  const RandomFfn f = random_ffn(*unfused, c, seed);
  const Tensor xn = make_tensor(*unfused, DType::f32, c.n, c.in, random_values(size_t(c.n * c.in), ++seed));
  const Tensor g = unfused->alloc(DType::f32, c.n, c.ff), u = unfused->alloc(DType::f32, c.n, c.ff);
  const Tensor proj = unfused->alloc(DType::f32, c.n, c.in);
  unfused->glu_ffn(xn, *f.gate_up, *f.down, g, u, proj, false, block8);
  CHECK(static_cast<const ragkv::CudaBackend&>(*unfused).glu_q8_fused() == 0);
}

// The default prefill FFN writes its gate/up products in f16, xn's rows scaled under the ceiling
// its weight's row sums allow (cuda/f16-product-bound.h): within the derived bound of
// tests/ffn-f16-products-bound.h of the unfused ops (f32 products), computed from their products;
// f16, Q4_K and Q8_0 weights (one quantised case in several dequantised tiles), SwiGLU and GeGLU,
// the three widths of the fused kernel, row 0 scaled for its products (values of 3e4 that would
// overflow them), finite everywhere. The weight's row-sum
// bound (CudaWeight::max_row_l1) is checked against the host's sums of its values.
TEST_CASE("cuda: glu_ffn with f16 products stays within its derived bound of the unfused ops") {
  if (gpu_missing()) return;
  Backends be;
  CHECK(be.gpu->kernels().find("+f32-ffn-products") == std::string::npos);
  uint32_t seed = 4600;
  // The last: every matrix larger than one dequantised tile (2^25 values), so products land past
  // the first tile's rows; and an intermediate over 16,384 columns (the fused kernel's widest form).
  const FfnCase cases[] = {{GgmlType::F16, 256, 768, 40},   {GgmlType::F16, 256, 4608, 9},
                           {GgmlType::Q4_K, 256, 768, 17},  {GgmlType::Q4_K, 512, 4608, 12},
                           {GgmlType::Q8_0, 256, 768, 20},  {GgmlType::Q4_K, 2048, 16640, 9}};
  // A matrix's values as the device multiplies them (f16), and their exact largest row sum.
  const auto host_values = [](GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows, int64_t cols,
                              double& max_row_l1) {
    std::vector<float> v(size_t(rows * cols));
    const size_t row_bytes = ragkv::ggml_row_bytes(type, cols);
    max_row_l1 = 0;
    for (int64_t r = 0; r < rows; ++r) {
      ragkv::dequantize_row(type, bytes.data() + size_t(r) * row_bytes, &v[size_t(r * cols)], cols);
      double l1 = 0;
      for (int64_t k = 0; k < cols; ++k) l1 += std::fabs(double(v[size_t(r * cols + k)]));
      max_row_l1 = std::max(max_row_l1, l1);
    }
    for (float& x : v) x = ragkv::test::round_f16(x);
    return v;
  };
  for (const FfnCase& c : cases) {
    const std::string type_name = ragkv::ggml_type_name(c.type);
    CAPTURE(type_name);
    CAPTURE(c.ff);
    CAPTURE(c.n);
    const RandomFfn w = random_ffn(*be.gpu, c, seed);
    const Weight &gate_up = *w.gate_up, &down = *w.down;
    ragkv::test::FfnProblem f;
    f.n = c.n;
    f.in = c.in;
    f.ff = c.ff;
    double l1_gate = 0, l1_up = 0, l1_down = 0;
    f.w_gate = host_values(c.type, w.gate_bytes, c.ff, c.in, l1_gate);
    f.w_up = host_values(c.type, w.up_bytes, c.ff, c.in, l1_up);
    f.w_down = host_values(c.type, w.down_bytes, c.in, c.ff, l1_down);
    const double l1 = std::max(l1_gate, l1_up);
    const float stored_l1 = ragkv::cuda_weight(gate_up).max_row_l1();
    CHECK(double(stored_l1) >= l1);
    CHECK(double(stored_l1) <= l1 * (1 + 1.0 / 512));
    const int top = ragkv::f16_product_top(stored_l1);
    REQUIRE(top >= 0);
    f.x = random_values(size_t(c.n * c.in), ++seed);
    for (int64_t j = 0; j < c.in; ++j) f.x[size_t(j)] *= 3e4f;  // row 0: products past 65504 unless scaled
    const Tensor gx = make_tensor(*be.gpu, DType::f32, c.n, c.in, f.x);
    for (const bool gelu : {false, true}) {
      CAPTURE(gelu);
      f.gelu = gelu;
      const Tensor g1 = be.gpu->alloc(DType::f32, c.n, c.ff), u1 = be.gpu->alloc(DType::f32, c.n, c.ff);
      const Tensor p1 = be.gpu->alloc(DType::f32, c.n, c.in);
      be.gpu->glu_ffn(gx, gate_up, down, g1, u1, p1, gelu, ragkv::Activations::f32);
      const Tensor g2 = be.gpu->alloc(DType::f32, c.n, c.ff), u2 = be.gpu->alloc(DType::f32, c.n, c.ff);
      const Tensor p2 = be.gpu->alloc(DType::f32, c.n, c.in);
      const Tensor gu[2] = {g2, u2};
      be.gpu->matmul_parts(gx, gate_up, gu, {});
      const std::vector<float> G = download_values(*be.gpu, g2), U = download_values(*be.gpu, u2);
      if (gelu) be.gpu->geglu(g2, u2, g2);
      else be.gpu->swiglu(g2, u2, g2);
      be.gpu->matmul(g2, down, p2);
      const std::vector<float> fused = download_values(*be.gpu, p1), ops = download_values(*be.gpu, p2);
      const std::vector<double> bound = ragkv::test::ffn_f16_products_bound(f, G, U, top);
      const ragkv::test::FfnComparison cmp = ragkv::test::compare_ffn(fused, ops, bound);
      CAPTURE(cmp.past_bound);
      CAPTURE(cmp.nse);
      CHECK(cmp.ok());
      CHECK(fused != ops);  // the f16 products' rounding shows: their path was taken
      bool finite = true;
      for (float v : fused) finite = finite && std::isfinite(v);
      CHECK(finite);
    }
  }
}

// A layer's Q and K rotated in one launch: bit for bit the two rope calls.
TEST_CASE("cuda: rope_qk equals rope on q then on k, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  const int64_t rows = 37;
  const int n_head = 9, n_head_kv = 3, head_dim = 64;
  const std::vector<int32_t> pos = [&] {
    std::vector<int32_t> v(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) v[size_t(i)] = int32_t(i * 97 % 5000);
    return v;
  }();
  for (bool neox : {false, true}) {
    CAPTURE(neox);
    ragkv::RopeParams p;
    p.n_rot = neox ? head_dim : head_dim / 2;
    p.freq_base = 10000.f;
    p.neox = neox;
    const auto qv = random_values(size_t(rows * n_head * head_dim), 41), kv = random_values(size_t(rows * n_head_kv * head_dim), 42);
    Tensor q1 = make_tensor(*be.gpu, DType::f32, rows, n_head * head_dim, qv);
    Tensor k1 = make_tensor(*be.gpu, DType::f32, rows, n_head_kv * head_dim, kv);
    Tensor q2 = make_tensor(*be.gpu, DType::f32, rows, n_head * head_dim, qv);
    Tensor k2 = make_tensor(*be.gpu, DType::f32, rows, n_head_kv * head_dim, kv);
    be.gpu->rope_qk(q1, k1, pos, n_head, n_head_kv, head_dim, p);
    be.gpu->rope(q2, pos, n_head, head_dim, p, false);
    be.gpu->rope(k2, pos, n_head_kv, head_dim, p, false);
    CHECK(download_values(*be.gpu, q1) == download_values(*be.gpu, q2));
    CHECK(download_values(*be.gpu, k1) == download_values(*be.gpu, k2));
  }
}

// A layer's Q and K rotated and its new K and V rows written to the cache in one launch: bit for bit
// rope_qk then scatter_kv_rows — f16 and f32 caches, normal and NeoX pairs, each with all
// dimensions rotated or half (the rest copied as they are), one row (decode) and many at scattered
// cache rows, positions away from 0, and rows named twice (there the backend runs the two ops: the
// last write stays).
TEST_CASE("cuda: rope_qk_scatter_kv equals rope_qk then scatter_kv_rows, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  const int n_head = 9, n_head_kv = 3, head_dim = 64;
  const int64_t q_cols = n_head * head_dim, kv_cols = n_head_kv * head_dim, cache_rows = 300;
  for (const int64_t rows : {int64_t(1), int64_t(37)}) {
    for (const bool repeat : {false, true}) {
      if (repeat && rows == 1) continue;
      std::vector<int32_t> pos(static_cast<size_t>(rows)), dst(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i) {
        pos[size_t(i)] = int32_t(i * 97 % 5000 + 13);
        dst[size_t(i)] = int32_t((i * 53 + 11) % cache_rows);  // distinct for 37 rows
      }
      if (repeat) dst[5] = dst[9];
      for (const DType cache : {DType::f16, DType::f32})
        for (const auto& [neox, n_rot] : {std::pair(false, head_dim), std::pair(false, head_dim / 2),
                                          std::pair(true, head_dim), std::pair(true, head_dim / 2)}) {
          CAPTURE(rows);
          CAPTURE(repeat);
          CAPTURE(int(cache));
          CAPTURE(neox);
          CAPTURE(n_rot);
          ragkv::RopeParams p;
          p.n_rot = n_rot;
          p.freq_base = 10000.f;
          p.neox = neox;
          const auto qv = random_values(size_t(rows * q_cols), 51), kv = random_values(size_t(rows * kv_cols), 52);
          const auto vv = random_values(size_t(rows * kv_cols), 53);
          const auto state = [&] {
            struct S {
              Tensor q, k, v, kc, vc;
            } st{make_tensor(*be.gpu, DType::f32, rows, q_cols, qv), make_tensor(*be.gpu, DType::f32, rows, kv_cols, kv),
                 make_tensor(*be.gpu, DType::f32, rows, kv_cols, vv), be.gpu->alloc(cache, cache_rows, kv_cols),
                 be.gpu->alloc(cache, cache_rows, kv_cols)};
            be.gpu->fill_zero(st.kc);
            be.gpu->fill_zero(st.vc);
            return st;
          };
          auto fused = state(), ops = state();
          be.gpu->rope_qk_scatter_kv(fused.q, fused.k, fused.v, pos, n_head, n_head_kv, head_dim, p, fused.kc, fused.vc,
                                     dst);
          be.gpu->rope_qk(ops.q, ops.k, pos, n_head, n_head_kv, head_dim, p);
          be.gpu->scatter_kv_rows(ops.k, ops.v, ops.kc, ops.vc, dst);
          const auto bytes = [&](const Tensor& t) {
            std::vector<uint8_t> h(t.bytes());
            be.gpu->download(t, h.data());
            return h;
          };
          CHECK(bytes(fused.q) == bytes(ops.q));
          CHECK(bytes(fused.k) == bytes(ops.k));
          CHECK(bytes(fused.kc) == bytes(ops.kc));
          CHECK(bytes(fused.vc) == bytes(ops.vc));
        }
    }
  }
}

// A decode step's Q, K and V products stored rotated and scattered by their own GEMV launch
// (cuda-matmul.cpp's qkv_rope_scatter_kv_impl, cuda/gemv-rope-store.cuh): bit for bit matmul_parts
// then rope_qk_scatter_kv on the same backend — f16 weights and the integer GEMV's types (Q4_K
// alone, Q4_K and Q5_K with a Q6_K V, Q8_0), 1 to 8 rows, pairs (2i, 2i + 1) and NeoX's, partial
// rotation, biases, f16 and f32 caches, x's blocks prepared by the norm before it. Types without
// a rotating launch, more than 8 rows and repeated cache rows take the two ops (the same values).
TEST_CASE("cuda: qkv_rope_scatter_kv equals matmul_parts then rope_qk_scatter_kv, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  const auto& cuda = static_cast<const ragkv::CudaBackend&>(*be.gpu);
  const auto block8 = ragkv::Activations::block8;
  uint32_t seed = 7300;
  struct Case {
    std::vector<GgmlType> types;
    int64_t in;
    int head_dim, n_head, n_head_kv;
    bool fused;
  };
  const Case cases[] = {{{GgmlType::F16, GgmlType::F16, GgmlType::F16}, 256, 64, 6, 2, true},
                        {{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q4_K}, 512, 128, 4, 1, true},
                        {{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K}, 256, 64, 6, 2, true},
                        {{GgmlType::Q5_K, GgmlType::Q5_K, GgmlType::Q6_K}, 256, 32, 2, 2, true},
                        {{GgmlType::Q8_0, GgmlType::Q8_0, GgmlType::Q8_0}, 256, 32, 8, 4, true},
                        {{GgmlType::Q4_0, GgmlType::Q4_0, GgmlType::Q4_0}, 256, 64, 2, 1, false}};
  const int64_t cache_rows = 64;
  for (const Case& c : cases) {
    const std::string type_name = ragkv::ggml_type_name(c.types[0]) + std::string("/") + ragkv::ggml_type_name(c.types[2]);
    CAPTURE(type_name);
    const int64_t part_rows[3] = {int64_t(c.n_head) * c.head_dim, int64_t(c.n_head_kv) * c.head_dim,
                                  int64_t(c.n_head_kv) * c.head_dim};
    const RandomStack qkv_stack = random_stack(*be.gpu, c.types, {part_rows[0], part_rows[1], part_rows[2]}, c.in, seed,
                                               "blk.0.attn_qkv");
    const std::unique_ptr<Weight>& w = qkv_stack.weight;
    std::vector<std::vector<float>> bias_values;
    std::vector<std::unique_ptr<Weight>> bias_weights;
    for (int p = 0; p < 3; ++p) {
      bias_values.push_back(random_values(size_t(part_rows[p]), ++seed));
      bias_weights.push_back(be.gpu->load_weight(f32_vector("blk.0.bias" + std::to_string(p), bias_values.back())));
    }
    const std::unique_ptr<Weight> norm =
        be.gpu->load_weight(f32_vector("blk.0.attn_norm.weight", random_values(size_t(c.in), ++seed)));
    for (const int64_t n : {int64_t(1), int64_t(2), int64_t(5), int64_t(8), int64_t(9)}) {
      std::vector<int32_t> pos(static_cast<size_t>(n)), dst(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        pos[size_t(i)] = int32_t(1000 + 37 * i);
        dst[size_t(i)] = int32_t((i * 23 + 5) % cache_rows);
      }
      const auto x = random_values(size_t(n * c.in), ++seed), y = random_values(size_t(n * c.in), ++seed);
      for (const auto& [neox, n_rot] : {std::pair(false, c.head_dim), std::pair(false, c.head_dim / 2),
                                        std::pair(true, c.head_dim), std::pair(true, c.head_dim / 2)})
        for (const bool repeat : {false, true})
          for (const bool prepare : {false, true})
            for (const bool with_bias : {false, true})
              for (const DType cache : {DType::f16, DType::f32}) {
                if (repeat && (n == 1 || prepare || with_bias)) continue;
                if (cache == DType::f32 && (prepare || with_bias || n_rot != c.head_dim)) continue;
                CAPTURE(n);
                CAPTURE(neox);
                CAPTURE(n_rot);
                CAPTURE(repeat);
                CAPTURE(prepare);
                CAPTURE(with_bias);
                CAPTURE(int(cache));
                ragkv::RopeParams rp;
                rp.n_rot = n_rot;
                rp.freq_base = 500000.f;
                rp.neox = neox;
                std::vector<int32_t> rows = dst;
                if (repeat) rows[1] = rows[0];
                const Weight* biases[3] = {};
                if (with_bias)
                  for (int p = 0; p < 3; ++p) biases[p] = bias_weights[size_t(p)].get();
                const auto run = [&](bool fused) {
                  Tensor xn = be.gpu->alloc(DType::f32, n, c.in);
                  if (prepare) {
                    Tensor tx = make_tensor(*be.gpu, DType::f32, n, c.in, x);
                    Tensor ty = make_tensor(*be.gpu, DType::f32, n, c.in, y);
                    be.gpu->add_rms_norm(tx, ty, *norm, 1e-5f, xn, ragkv::NextProduct{w.get(), block8});
                  } else {
                    upload_values(*be.gpu, xn, x);
                  }
                  const Tensor q = be.gpu->alloc(DType::f32, n, part_rows[0]), k = be.gpu->alloc(DType::f32, n, part_rows[1]),
                               v = be.gpu->alloc(DType::f32, n, part_rows[2]);
                  const Tensor kc = be.gpu->alloc(cache, cache_rows, part_rows[1]),
                               vc = be.gpu->alloc(cache, cache_rows, part_rows[2]);
                  be.gpu->fill_zero(kc);
                  be.gpu->fill_zero(vc);
                  const Tensor qkv[3] = {q, k, v};
                  if (fused) {
                    be.gpu->qkv_rope_scatter_kv(xn, *w, qkv, biases, block8, pos, c.n_head, c.n_head_kv, c.head_dim, rp,
                                                kc, vc, rows);
                  } else {
                    be.gpu->matmul_parts(xn, *w, qkv, biases, block8);
                    be.gpu->rope_qk_scatter_kv(q, k, v, pos, c.n_head, c.n_head_kv, c.head_dim, rp, kc, vc, rows);
                  }
                  std::vector<std::vector<uint8_t>> out;
                  for (const Tensor& t : {q, k, v, kc, vc}) {
                    std::vector<uint8_t> h(t.bytes());
                    be.gpu->download(t, h.data());
                    out.push_back(std::move(h));
                  }
                  return out;
                };
                const int64_t fused_before = cuda.qkv_rope_fused();
                const auto fused = run(true);
                CHECK(cuda.qkv_rope_fused() - fused_before == (c.fused && !repeat && n <= 8 ? 1 : 0));
                const auto ops = run(false);
                CHECK(fused[0] == ops[0]);  // q
                CHECK(fused[1] == ops[1]);  // k
                CHECK(fused[2] == ops[2]);  // v
                CHECK(fused[3] == ops[3]);  // the K cache
                CHECK(fused[4] == ops[4]);  // the V cache
              }
    }
  }
}

TEST_CASE("cuda: rms_norm matches the CPU backend (out of place and in place)") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 100;
  for (const NormCase& c : norm_cases({1e-6f, 1e-5f})) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    CAPTURE(c.eps);
    auto x = random_values(size_t(c.rows * c.cols), ++seed);
    // Rows of very different magnitudes, and an all-zero row (y = 0, not NaN).
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.cols; ++j) x[r * c.cols + j] *= std::pow(10.f, float(r % 7) - 3.f);
    if (c.rows > 1)
      for (int64_t j = 0; j < c.cols; ++j) x[c.cols + j] = 0.f;
    const auto wv = random_values(size_t(c.cols), ++seed, -1.5f, 1.5f);
    const WeightPair w = load_both(be, f32_vector("blk.0.attn_norm.weight", wv));
    CHECK(w.gpu->out_features == 1);
    CHECK(w.gpu->in_features == c.cols);

    expect_close_both_ways(be, c.rows, c.cols, x, kTolF32, [&](Backend& b, const Tensor& in, const Tensor& out) {
      b.rms_norm(in, w.on(b), c.eps, out);
    });
  }
}

TEST_CASE("cuda: layer_norm matches the CPU backend (out of place and in place)") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 1200;
  for (const NormCase& c : norm_cases({1e-12f, 1e-5f})) {
    CAPTURE(c.rows);
    CAPTURE(c.cols);
    CAPTURE(c.eps);
    auto x = random_values(size_t(c.rows * c.cols), ++seed);
    // Rows of very different scales, a row with a large mean and a small spread (two-pass
    // variance), and a constant row (variance 0: y = b).
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t j = 0; j < c.cols; ++j) x[r * c.cols + j] *= std::pow(10.f, float(r % 5) - 2.f);
    if (c.rows > 1)
      for (int64_t j = 0; j < c.cols; ++j) x[c.cols + j] = 1000.f + x[c.cols + j] * 0.01f;
    if (c.rows > 2)
      for (int64_t j = 0; j < c.cols; ++j) x[2 * c.cols + j] = 3.5f;
    const auto wv = random_values(size_t(c.cols), ++seed, -1.5f, 1.5f);
    const auto bv = random_values(size_t(c.cols), ++seed, -0.5f, 0.5f);
    const WeightPair w = load_both(be, f32_vector("ln.weight", wv));
    const WeightPair bias = load_both(be, f32_vector("ln.bias", bv));

    expect_close_both_ways(be, c.rows, c.cols, x, kTolF32, [&](Backend& b, const Tensor& in, const Tensor& out) {
      b.layer_norm(in, w.on(b), bias.on(b), c.eps, out);
    });
  }
}

TEST_CASE("cuda: gelu_erf matches the CPU backend (out of place and in place), special values included") {
  if (gpu_missing()) return;
  Backends be;
  const UnaryCall gelu = [](Backend& b, const Tensor& x, const Tensor& y) { b.gelu_erf(x, y); };
  uint32_t seed = 1300;
  for (const Shape& s : row_shapes()) {
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const auto x = random_values(size_t(s.rows * s.cols), ++seed, -8.f, 8.f);
    expect_close_both_ways(be, s.rows, s.cols, x, kTolF32, gelu);
  }
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.f,   -0.f,  1e-30f, -1e-30f, 3.f,  -3.f, 10.f, -10.f, 13.f,
                                      -13.f, 50.f, -50.f,  1e30f,   -1e30f, inf, -inf,
                                      std::numeric_limits<float>::quiet_NaN()};
  const int64_t n = int64_t(special.size());
  expect_close_both_ways(be, 1, n, special, kTolF32, gelu, /*ref_must_be_finite=*/false);
}

TEST_CASE("cuda: swiglu and geglu match the CPU backend (and with out aliasing gate)") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 300;
  for (Elementwise op : {Elementwise::swiglu, Elementwise::geglu}) {
    for (const Shape& s : row_shapes()) {
      const std::string op_name = elementwise_name(op);
      CAPTURE(op_name);
      CAPTURE(s.rows);
      CAPTURE(s.cols);
      const auto gate = random_values(size_t(s.rows * s.cols), ++seed, -8.f, 8.f);
      const auto up = random_values(size_t(s.rows * s.cols), ++seed);
      const Results r = run_both(be,
                                 {input(DType::f32, s.rows, s.cols, gate), input(DType::f32, s.rows, s.cols, up),
                                  output(DType::f32, s.rows, s.cols, zeros(gate.size()))},
                                 [&](Backend& b, const std::vector<Tensor>& t) { run_glu(b, op, t[0], t[1], t[2]); });
      expect_close(r.gpu[2], r.cpu[2], kTolF32);
      // The model's call: the result replaces gate.
      const Results into_gate =
          run_both(be, {output(DType::f32, s.rows, s.cols, gate), input(DType::f32, s.rows, s.cols, up)},
                   [&](Backend& b, const std::vector<Tensor>& t) { run_glu(b, op, t[0], t[1], t[0]); });
      expect_close(into_gate.gpu[0], r.cpu[2], kTolF32);
    }
  }
}

TEST_CASE("cuda: swiglu, geglu and add agree with the CPU on special values") {
  if (gpu_missing()) return;
  Backends be;
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> gate = {0.f, -0.f, 1e-30f, -1e-30f, 20.f, -20.f, 50.f, -50.f,
                                   100.f, -100.f, inf, -inf, nan, 3.f, -3.f, 1e-3f};
  const std::vector<float> up = {1.f, -1.f, 2.f, 0.5f, -3.f, 1.f, 0.f, 2.f,
                                 -1.f, 1.f, 1.f, 1.f, 1.f, inf, -inf, nan};
  const int64_t n = int64_t(gate.size());
  for (Elementwise op : {Elementwise::swiglu, Elementwise::geglu, Elementwise::add}) {
    const std::string op_name = elementwise_name(op);
    CAPTURE(op_name);
    if (op == Elementwise::add) {  // a += b: the result is the first argument
      const Results r = run_both(be, {output(DType::f32, 1, n, gate), input(DType::f32, 1, n, up)},
                                 [](Backend& b, const std::vector<Tensor>& t) { b.add(t[0], t[1]); });
      expect_close(r.gpu[0], r.cpu[0], kTolF32, /*ref_must_be_finite=*/false);
    } else {
      const Results r = run_both(be,
                                 {input(DType::f32, 1, n, gate), input(DType::f32, 1, n, up),
                                  output(DType::f32, 1, n, zeros(gate.size()))},
                                 [&](Backend& b, const std::vector<Tensor>& t) { run_glu(b, op, t[0], t[1], t[2]); });
      expect_close(r.gpu[2], r.cpu[2], kTolF32, /*ref_must_be_finite=*/false);
    }
  }
}

TEST_CASE("cuda: add matches the CPU backend, a += a included") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 400;
  for (const Shape& s : row_shapes()) {
    CAPTURE(s.rows);
    CAPTURE(s.cols);
    const auto a = random_values(size_t(s.rows * s.cols), ++seed, -100.f, 100.f);
    const auto addend = random_values(size_t(s.rows * s.cols), ++seed);
    const Results r = run_both(be, {output(DType::f32, s.rows, s.cols, a), input(DType::f32, s.rows, s.cols, addend)},
                               [](Backend& b, const std::vector<Tensor>& t) { b.add(t[0], t[1]); });
    expect_close(r.gpu[0], r.cpu[0], kTolF32);

    // a += a (both operands the same tensor) doubles exactly.
    const Results doubled = run_both(be, {output(DType::f32, s.rows, s.cols, addend)},
                                     [](Backend& b, const std::vector<Tensor>& t) { b.add(t[0], t[0]); });
    std::vector<float> twice(addend);
    for (float& v : twice) v *= 2.f;
    CHECK(doubled.gpu[0] == twice);
  }
}

TEST_CASE("cuda: rope matches the CPU backend (f32/f16, normal/NeoX, freq factors, inverse)") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 200;
  for (const RopeCase& c : kRopeCases) {
    ragkv::RopeParams p;
    p.n_rot = c.n_rot;
    p.freq_base = c.base;
    p.freq_scale = c.scale;
    p.neox = c.neox;
    if (c.factors) p.freq_factors = random_values(size_t(c.n_rot / 2), ++seed, 1.f, 8.f);
    const int64_t cols = int64_t(c.n_heads) * c.head_dim;
    for (int64_t rows : kRows) {
      // Positions from 0 to long contexts (θ reaches thousands of radians), in no order.
      std::vector<int32_t> pos(static_cast<size_t>(rows));
      std::mt19937 rng(++seed);
      for (int64_t r = 0; r < rows; ++r) pos[r] = r == 0 ? 0 : int32_t(rng() % 32768);
      for (DType dt : {DType::f32, DType::f16}) {
        for (bool inverse : {false, true}) {
          const std::string what = c.what;
          CAPTURE(what);
          CAPTURE(rows);
          const std::string dtype = ragkv::dtype_name(dt);
          CAPTURE(dtype);
          CAPTURE(inverse);
          const auto x = round_to(dt, random_values(size_t(rows * cols), ++seed));
          const Results r = run_both(be, {output(dt, rows, cols, x)}, [&](Backend& b, const std::vector<Tensor>& t) {
            b.rope(t[0], pos, c.n_heads, c.head_dim, p, inverse);
          });
          const std::vector<float>& got = r.gpu[0];
          expect_close(got, r.cpu[0], dt == DType::f32 ? kTolF32 : kTolF16);

          // Dimensions ≥ n_rot are not touched at all.
          int64_t changed = 0;
          for (int64_t row = 0; row < rows; ++row)
            for (int h = 0; h < c.n_heads; ++h)
              for (int d = c.n_rot; d < c.head_dim; ++d) {
                const int64_t i = row * cols + int64_t(h) * c.head_dim + d;
                changed += got[i] != x[i];
              }
          CHECK(changed == 0);

          // Rotating back restores the input (f32; f16 rounds twice).
          if (dt == DType::f32) {
            const Results back = run_both(be, {output(dt, rows, cols, x)}, [&](Backend& b, const std::vector<Tensor>& t) {
              b.rope(t[0], pos, c.n_heads, c.head_dim, p, inverse);
              b.rope(t[0], pos, c.n_heads, c.head_dim, p, !inverse);
            });
            expect_close(back.gpu[0], x, kTolF32);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda: f32 <-> f16 conversion kernels round like core/format/fp16.h, bit for bit") {
  if (gpu_missing()) return;
  auto gpu = ragkv::make_cuda_backend(0);
  const cudaStream_t stream = static_cast<ragkv::CudaBackend&>(*gpu).stream();
  const auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };

  // f16 → f32: every bit pattern (NaNs need only stay NaN; payloads may differ).
  std::vector<uint16_t> halves(65536);
  std::iota(halves.begin(), halves.end(), uint16_t(0));
  Tensor h = gpu->alloc(DType::f16, 1, 65536);
  Tensor f = gpu->alloc(DType::f32, 1, 65536);
  gpu->upload(h, halves.data());
  ragkv::convert_f16_to_f32_cuda(h.as<__half>(), f.as<float>(), 65536, stream);
  std::vector<float> widened(65536);
  gpu->download(f, widened.data());
  size_t bad = 0;
  for (size_t i = 0; i < halves.size(); ++i) {
    const float ref = ragkv::fp16_to_fp32(halves[i]);
    bad += std::isnan(ref) ? !std::isnan(widened[i]) : bits(widened[i]) != bits(ref);
  }
  CHECK(bad == 0);

  // f32 → f16: every finite f16 value, the midpoints between neighbours (ties to even) and one
  // f32 ulp either side, both signs; the overflow threshold, subnormals, specials, random bits.
  std::vector<float> values;
  for (uint16_t p = 0; p < 0x7bff; ++p) {
    const float lo = ragkv::fp16_to_fp32(p), hi = ragkv::fp16_to_fp32(uint16_t(p + 1));
    const float mid = lo + (hi - lo) / 2;  // exact: both have at most 11 significant bits
    for (float v : {lo, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {65504.f, 65519.996f, 65520.f, 1e30f, inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                  1e-40f, std::ldexp(1.f, -25), std::ldexp(1.0001f, -25), std::ldexp(1.5f, -24),
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min()})
    values.push_back(v);
  std::mt19937 rng(1400);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = rng();
    float v;
    std::memcpy(&v, &u, 4);
    values.push_back(v);
  }
  const int64_t n = int64_t(values.size());
  Tensor src = gpu->alloc(DType::f32, 1, n);
  Tensor dst = gpu->alloc(DType::f16, 1, n);
  gpu->upload(src, values.data());
  ragkv::convert_f32_to_f16_cuda(src.as<float>(), dst.as<__half>(), n, stream);
  std::vector<uint16_t> rounded(values.size());
  gpu->download(dst, rounded.data());
  bad = 0;
  size_t first_bad = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t ref = ragkv::fp32_to_fp16(values[i]);
    const bool ok = std::isnan(values[i]) ? (rounded[i] & 0x7c00) == 0x7c00 && (rounded[i] & 0x3ff) != 0
                                          : rounded[i] == ref;
    if (!ok && bad++ == 0) first_bad = i;
  }
  CAPTURE(first_bad);
  CAPTURE(values[first_bad]);
  CHECK(bad == 0);
}

TEST_CASE("cuda: load_weight stores matrices as the CPU's values, quantised or rounded to f16") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 500;
  for (GgmlType type : kWeightTypes) {
    const int64_t block = ragkv::ggml_block_elems(type);
    std::vector<int64_t> col_sizes;
    if (block == 1) col_sizes = {1, 37, 1000, 2049};
    else col_sizes = {block, 3 * block, block == 32 ? 1056 : 2304};
    for (int64_t rows : {int64_t(2), int64_t(37), int64_t(300)}) {
      for (int64_t cols : col_sizes) {
        const std::string type_name = ragkv::ggml_type_name(type);
        CAPTURE(type_name);
        CAPTURE(rows);
        CAPTURE(cols);
        const auto bytes = random_matrix_bytes(type, rows, cols, ++seed);
        const auto t = matrix_tensor("token_embd.weight", type, rows, cols, bytes);
        auto w = be.gpu->load_weight(t);
        CHECK(w->out_features == rows);
        CHECK(w->in_features == cols);
        CHECK(w->name == "token_embd.weight");

        // Each row once, in order: out == the CPU's dequantised values (rounded to f16 unless kept
        // quantised).
        std::vector<int32_t> ids(static_cast<size_t>(rows));
        std::iota(ids.begin(), ids.end(), 0);
        const auto expected = stored_values(type, dequantized(type, rows, cols, bytes));
        Guarded og = make_guarded(*be.gpu, DType::f32, rows, cols, std::vector<float>(expected.size(), 0.f));
        be.gpu->embed(*w, ids, og.view, 1.f);
        expect_close(read_guarded(*be.gpu, og), expected, 0.f);
      }
    }
  }
  // More values than one conversion chunk (2^22): rows that straddle chunk boundaries.
  for (GgmlType type : {GgmlType::F32, GgmlType::Q4_K}) {
    const std::string type_name = ragkv::ggml_type_name(type);
    CAPTURE(type_name);
    const int64_t rows = 2000, cols = 2304;
    const auto bytes = random_matrix_bytes(type, rows, cols, ++seed);
    auto w = be.gpu->load_weight(matrix_tensor("output.weight", type, rows, cols, bytes));
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    std::iota(ids.begin(), ids.end(), 0);
    Guarded og = make_guarded(*be.gpu, DType::f32, rows, cols, std::vector<float>(size_t(rows * cols), 0.f));
    be.gpu->embed(*w, ids, og.view, 1.f);
    expect_close(read_guarded(*be.gpu, og), stored_values(type, dequantized(type, rows, cols, bytes)), 0.f);
  }
  // RAGKV_CUDA_WEIGHTS=f16: the quantised types are converted to f16 at load too.
  {
    const ragkv::test::ScopedEnv f16_weights("RAGKV_CUDA_WEIGHTS", "f16");
    auto gpu = ragkv::make_cuda_backend(0);
    for (GgmlType type : {GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K}) {
      const std::string type_name = ragkv::ggml_type_name(type);
      CAPTURE(type_name);
      const int64_t rows = 37, cols = 512;
      const auto bytes = random_matrix_bytes(type, rows, cols, ++seed);
      auto w = gpu->load_weight(matrix_tensor("blk.0.ffn_up.weight", type, rows, cols, bytes));
      std::vector<int32_t> ids(static_cast<size_t>(rows));
      std::iota(ids.begin(), ids.end(), 0);
      Guarded og = make_guarded(*gpu, DType::f32, rows, cols, std::vector<float>(size_t(rows * cols), 0.f));
      gpu->embed(*w, ids, og.view, 1.f);
      expect_close(read_guarded(*gpu, og), stored_values(type, dequantized(type, rows, cols, bytes), true), 0.f);
    }
    const ragkv::test::ScopedEnv bad_policy("RAGKV_CUDA_WEIGHTS", "int4");
    CHECK_THROWS_WITH_AS(ragkv::make_cuda_backend(0), doctest::Contains("RAGKV_CUDA_WEIGHTS=int4"), ragkv::Error);
  }
  // Vectors of any type load as f32, exactly the CPU's values.
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
    const std::string type_name = ragkv::ggml_type_name(type);
    CAPTURE(type_name);
    const int64_t cols = 64;
    const auto bytes = random_matrix_bytes(type, 1, cols, ++seed);
    ragkv::GgufTensor t = matrix_tensor("blk.0.attn_norm.weight", type, 1, cols, bytes);
    t.ne = {cols};
    auto w = be.gpu->load_weight(t);
    CHECK(w->out_features == 1);
    CHECK(w->in_features == cols);
    Guarded og = make_guarded(*be.gpu, DType::f32, 1, cols, std::vector<float>(size_t(cols), 0.f));
    be.gpu->embed(*w, std::vector<int32_t>{0}, og.view, 1.f);
    expect_close(read_guarded(*be.gpu, og), dequantized(type, 1, cols, bytes), 0.f);
  }
}

TEST_CASE("cuda: load_weight refuses values f16 cannot hold, unsupported types and short data") {
  if (gpu_missing()) return;
  Backends be;
  auto& gpu = *be.gpu;
  const int64_t rows = 4, cols = 64;
  std::vector<float> v = random_values(size_t(rows * cols), 600);

  // Largest f16 value: accepted, and stored exactly.
  v[5] = 65504.f;
  v[6] = -65504.f;
  auto ok = gpu.load_weight(f32_matrix("blk.0.ffn_down.weight", rows, cols, v));
  Guarded og = make_guarded(gpu, DType::f32, 1, cols, std::vector<float>(size_t(cols), 0.f));
  gpu.embed(*ok, std::vector<int32_t>{0}, og.view, 1.f);
  const auto row0 = read_guarded(gpu, og);
  CHECK(row0[5] == 65504.f);
  CHECK(row0[6] == -65504.f);

  // Beyond it, or not finite: refused, naming the tensor, the element and the limit.
  for (float bad : {65505.f, -70000.f, 1e30f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(bad);
    std::vector<float> b = v;
    b[2 * cols + 7] = bad;
    const auto t = f32_matrix("blk.3.ffn_down.weight", rows, cols, b);
    CHECK_THROWS_WITH_AS(gpu.load_weight(t), doctest::Contains("'blk.3.ffn_down.weight'"), ragkv::Error);
    CHECK_THROWS_WITH_AS(gpu.load_weight(t), doctest::Contains("[2][7]"), ragkv::Error);
    CHECK_THROWS_WITH_AS(gpu.load_weight(t), doctest::Contains("65504"), ragkv::Error);
  }
  // The same through BF16 (range of f32) and F16 (inf and NaN bit patterns).
  {
    std::vector<uint16_t> h(size_t(rows * cols), ragkv::fp32_to_bf16(0.5f));
    h[9] = ragkv::fp32_to_bf16(1e6f);
    std::vector<uint8_t> bytes(h.size() * 2);
    std::memcpy(bytes.data(), h.data(), bytes.size());
    CHECK_THROWS_WITH_AS(gpu.load_weight(matrix_tensor("bf16.weight", GgmlType::BF16, rows, cols, bytes)),
                         doctest::Contains("[0][9]"), ragkv::Error);
  }
  for (uint16_t special : {uint16_t(0x7c00), uint16_t(0xfc00), uint16_t(0x7e00)}) {
    std::vector<uint16_t> h(size_t(rows * cols), ragkv::fp32_to_fp16(0.5f));
    h[cols + 1] = special;
    std::vector<uint8_t> bytes(h.size() * 2);
    std::memcpy(bytes.data(), h.data(), bytes.size());
    CHECK_THROWS_WITH_AS(gpu.load_weight(matrix_tensor("f16.weight", GgmlType::F16, rows, cols, bytes)),
                         doctest::Contains("[1][1]"), ragkv::Error);
  }

  // A quantised matrix stays quantised but is checked the same way (its prefill tiles are f16):
  // a Q8_0 block with scale 1000 holds values up to 127000.
  {
    auto bytes = random_matrix_bytes(GgmlType::Q8_0, rows, cols, 601);
    uint8_t* block = bytes.data() + 3 * ragkv::ggml_block_bytes(GgmlType::Q8_0);  // row 1, elements 32..63
    const uint16_t big = ragkv::fp32_to_fp16(1000.f);
    std::memcpy(block, &big, 2);
    std::fill(block + 2, block + 34, uint8_t(0));
    block[2 + 4] = 100;  // element 36 of the row: 100000
    CHECK_THROWS_WITH_AS(gpu.load_weight(matrix_tensor("q8.weight", GgmlType::Q8_0, rows, cols, bytes)),
                         doctest::Contains("[1][36]"), ragkv::Error);
  }

  // Types ragkv does not dequantise, rows that split a block, and data shorter than the shape.
  std::vector<uint8_t> raw(4096, 0);
  CHECK_THROWS_WITH_AS(gpu.load_weight(matrix_tensor("q2k.weight", GgmlType::Q2_K, 2, 256, raw)),
                       doctest::Contains("Q2_K"), ragkv::Error);
  CHECK_THROWS_AS(gpu.load_weight(matrix_tensor("q8.weight", GgmlType::Q8_0, 2, 48, raw)), ragkv::Error);
  ragkv::GgufTensor short_data = f32_matrix("short.weight", rows, cols, v);
  short_data.nbytes -= 4;
  CHECK_THROWS_WITH_AS(gpu.load_weight(short_data), doctest::Contains("'short.weight'"), ragkv::Error);
  ragkv::GgufTensor no_data = f32_matrix("empty.weight", rows, cols, v);
  no_data.data = nullptr;
  CHECK_THROWS_AS(gpu.load_weight(no_data), ragkv::Error);
}


TEST_CASE("cuda: embed matches the CPU backend") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 700;
  for (int64_t vocab : kVocabs) {
    for (int64_t dim : kCols) {
      // f16-exact table values: both backends then hold the same table, and the one f32
      // multiply by scale is the same on both, so the results are bit-identical.
      const auto table = round_to(DType::f16, random_values(size_t(vocab * dim), ++seed));
      const WeightPair w = load_both(be, f32_matrix("token_embd.weight", vocab, dim, table));
      for (size_t n : kIdCounts) {
        for (float scale : kEmbedScales) {
          CAPTURE(vocab);
          CAPTURE(dim);
          CAPTURE(n);
          CAPTURE(scale);
          auto ids = random_rows(n, vocab, ++seed);
          ids[0] = int32_t(vocab - 1);
          if (n > 1) ids[1] = 0;
          const Results r = run_both(be, {output(DType::f32, int64_t(n), dim, zeros(n * size_t(dim)))},
                                     [&](Backend& b, const std::vector<Tensor>& t) { b.embed(w.on(b), ids, t[0], scale); });
          expect_close(r.gpu[0], r.cpu[0], 0.f);
        }
      }
    }
  }
  // A table that is one f32 row (a vector weight).
  const auto row = random_values(100, ++seed);
  const WeightPair v = load_both(be, f32_vector("type_embd.weight", row));
  const std::vector<int32_t> same_id(5, 0);
  const Results r = run_both(be, {output(DType::f32, 5, 100, zeros(500))},
                             [&](Backend& b, const std::vector<Tensor>& t) { b.embed(v.on(b), same_id, t[0], 2.f); });
  expect_close(r.gpu[0], r.cpu[0], 0.f);

  // Ids outside the vocabulary fail on the host, before anything is written.
  const auto table = random_values(10 * 64, ++seed);
  auto w = be.gpu->load_weight(f32_matrix("token_embd.weight", 10, 64, table));
  Guarded bad = make_guarded(*be.gpu, DType::f32, 2, 64, zeros(128));
  for (int32_t id : {-1, 10, std::numeric_limits<int32_t>::max()}) {
    CAPTURE(id);
    const std::vector<int32_t> ids = {3, id};
    CHECK_THROWS_WITH_AS(be.gpu->embed(*w, ids, bad.view, 1.f),
                         doctest::Contains("outside the vocabulary of 10 tokens"), ragkv::Error);
  }
  CHECK(read_guarded(*be.gpu, bad) == zeros(128));
}

TEST_CASE("cuda: matmul matches the CPU backend (weights of every type, f32 vector weights, bias)") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 800;
  for (const MatmulCase& c : matmul_cases()) {
    const std::string type_name = ragkv::ggml_type_name(c.type);
    CAPTURE(type_name);
    CAPTURE(c.n);
    CAPTURE(c.in);
    CAPTURE(c.out);
    CAPTURE(c.bias);
    CAPTURE(c.x_range);
    const auto bytes = random_matrix_bytes(c.type, c.out, c.in, ++seed);
    const WeightPair w = load_both(be, matrix_tensor("blk.0.attn_q.weight", c.type, c.out, c.in, bytes));
    const auto bias = random_values(size_t(c.out), ++seed, -0.5f, 0.5f);
    const WeightPair b_w = load_both(be, f32_vector("blk.0.attn_q.bias", bias));
    const auto x = random_values(size_t(c.n * c.in), ++seed, -c.x_range, c.x_range);
    const Results r = run_both(be, {input(DType::f32, c.n, c.in, x), output(DType::f32, c.n, c.out, zeros(size_t(c.n * c.out)))},
                               [&](Backend& b, const std::vector<Tensor>& t) {
                                 b.matmul(t[0], w.on(b), t[1], c.bias ? &b_w.on(b) : nullptr);
                               });
    const auto bound = matmul_bounds(x, dequantized(c.type, c.out, c.in, bytes), c.bias ? &bias : nullptr, r.cpu[1],
                                     c.n, c.in, c.out, /*f16_operands=*/true);
    expect_within(r.gpu[1], r.cpu[1], bound, kMatmulMaxNmse);
  }

  // A vector weight (one output): f32 operands, no f16 rounding.
  for (int64_t n : kVectorMatmulRows) {
    for (int64_t in : kVectorMatmulIn) {
      CAPTURE(n);
      CAPTURE(in);
      const auto wv = random_values(size_t(in), ++seed);
      const WeightPair w = load_both(be, f32_vector("cls.weight", wv));
      const std::vector<float> bias = {0.25f};
      const WeightPair b_w = load_both(be, f32_vector("cls.bias", bias));
      const auto x = random_values(size_t(n * in), ++seed);
      const Results r = run_both(be, {input(DType::f32, n, in, x), output(DType::f32, n, 1, zeros(size_t(n)))},
                                 [&](Backend& b, const std::vector<Tensor>& t) { b.matmul(t[0], w.on(b), t[1], &b_w.on(b)); });
      const auto bound = matmul_bounds(x, wv, &bias, r.cpu[1], n, in, 1, /*f16_operands=*/false);
      expect_within(r.gpu[1], r.cpu[1], bound, kMatmulMaxNmse);
    }
  }
}

TEST_CASE("cuda: dequantize_to_f16 gives the f16 values load_weight stores for the type, bit for bit") {
  if (gpu_missing()) return;
  auto gpu = ragkv::make_cuda_backend(0);
  const cudaStream_t stream = static_cast<ragkv::CudaBackend&>(*gpu).stream();
  uint32_t seed = 1500;
  for (GgmlType type : kWeightTypes) {
    if (!ragkv::quant_decode::device_decodable(type)) continue;
    const std::string type_name = ragkv::ggml_type_name(type);
    CAPTURE(type_name);
    const int64_t block = ragkv::ggml_block_elems(type);
    for (int64_t rows : {int64_t(1), int64_t(37)}) {
      for (int64_t cols : {block, 9 * block}) {
        CAPTURE(rows);
        CAPTURE(cols);
        const auto bytes = random_matrix_bytes(type, rows, cols, ++seed);
        Tensor raw = gpu->alloc(DType::f32, 1, int64_t((bytes.size() + 3) / 4));
        std::vector<uint8_t> padded(size_t(raw.numel()) * 4, 0);
        std::copy(bytes.begin(), bytes.end(), padded.begin());
        gpu->upload(raw, padded.data());
        Tensor out = gpu->alloc(DType::f16, rows, cols);
        ragkv::dequantize_to_f16_cuda(type, raw.as<uint8_t>(), rows, cols, out.as<__half>(), stream);
        CHECK(download_values(*gpu, out) == round_to(DType::f16, dequantized(type, rows, cols, bytes)));
      }
    }
  }
}

namespace {

// A stack's split outputs: part p holds columns [first_p, first_p + part_rows[p]) of ref [n][out].
void expect_parts_within(Backend& gpu, const std::vector<Guarded>& outs, std::span<const int64_t> part_rows,
                         const std::vector<float>& ref, const std::vector<double>& bound, int64_t n, int64_t out) {
  int64_t first = 0;
  for (size_t p = 0; p < outs.size(); ++p) {
    CAPTURE(p);
    std::vector<float> ref_p;
    std::vector<double> bound_p;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = first; j < first + part_rows[p]; ++j) {
        ref_p.push_back(ref[size_t(i * out + j)]);
        bound_p.push_back(bound[size_t(i * out + j)]);
      }
    expect_within(read_guarded(gpu, outs[p]), ref_p, bound_p, kMatmulMaxNmse);
    first += part_rows[p];
  }
}

}  // namespace

TEST_CASE("cuda: quantised matmul (GEMV up to kQuantGemvMaxRows rows, f16 tiles beyond) within its bounds of the exact product") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 1600;
  struct Case {
    GgmlType type;
    int64_t in, out;
  };
  // Both block sizes; out not a multiple of the GEMV's four rows per block.
  const Case cases[] = {{GgmlType::Q4_0, 1024, 131}, {GgmlType::Q4_1, 576, 67},  {GgmlType::Q5_0, 640, 130},
                        {GgmlType::Q5_1, 512, 33},   {GgmlType::Q8_0, 2048, 65}, {GgmlType::Q4_K, 2304, 130},
                        {GgmlType::Q5_K, 512, 129},  {GgmlType::Q6_K, 1536, 66}};
  for (const Case& c : cases) {
    const std::string type_name = ragkv::ggml_type_name(c.type);
    CAPTURE(type_name);
    const auto bytes = random_matrix_bytes(c.type, c.out, c.in, ++seed);
    const auto w = dequantized(c.type, c.out, c.in, bytes);
    auto gw = be.gpu->load_weight(matrix_tensor("blk.0.ffn_down.weight", c.type, c.out, c.in, bytes));
    const auto bias = random_values(size_t(c.out), ++seed, -0.5f, 0.5f);
    auto gb = be.gpu->load_weight(f32_vector("blk.0.ffn_down.bias", bias));
    for (int64_t n = 1; n <= ragkv::kQuantGemvMaxRows + 2; ++n) {
      for (bool with_bias : {false, true}) {
        CAPTURE(n);
        CAPTURE(with_bias);
        const auto x = random_values(size_t(n * c.in), ++seed);
        Guarded gx = make_guarded(*be.gpu, DType::f32, n, c.in, x);
        Guarded gy = make_guarded(*be.gpu, DType::f32, n, c.out, zeros(size_t(n * c.out)));
        be.gpu->matmul(gx.view, *gw, gy.view, with_bias ? gb.get() : nullptr);
        const auto ref = exact_matmul(x, w, with_bias ? &bias : nullptr, n, c.in, c.out);
        const bool tiles = n > ragkv::kQuantGemvMaxRows;
        expect_within(read_guarded(*be.gpu, gy), ref,
                      matmul_bounds(x, w, with_bias ? &bias : nullptr, ref, n, c.in, c.out, tiles), kMatmulMaxNmse);
        CHECK(read_guarded(*be.gpu, gx) == x);
      }
    }
  }

  // A stack of parts of different types (a Q4_K_M file's Q/K in Q4_K, V in Q6_K, plus Q8_0), into
  // their own outputs with biases and, whole, into one output; a decode step and a prefill.
  const int64_t in = 512;
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0};
  const int64_t part_rows[] = {64, 32, 32, 5};
  std::vector<std::vector<uint8_t>> part_bytes;
  std::vector<ragkv::GgufTensor> tensors;
  std::vector<float> w_all;
  for (size_t p = 0; p < 4; ++p) part_bytes.push_back(random_matrix_bytes(types[p], part_rows[p], in, ++seed));
  for (size_t p = 0; p < 4; ++p) {
    tensors.push_back(matrix_tensor("blk.0.part" + std::to_string(p), types[p], part_rows[p], in, part_bytes[p]));
    const auto wp = dequantized(types[p], part_rows[p], in, part_bytes[p]);
    w_all.insert(w_all.end(), wp.begin(), wp.end());
  }
  const ragkv::GgufTensor* ptrs[] = {&tensors[0], &tensors[1], &tensors[2], &tensors[3]};
  auto stack = be.gpu->load_weight_stack(ptrs, "blk.0.attn_qkv");
  const int64_t out = 64 + 32 + 32 + 5;
  const auto bias_all = random_values(size_t(out), ++seed, -0.5f, 0.5f);
  std::vector<std::unique_ptr<Weight>> part_bias;
  int64_t first = 0;
  for (size_t p = 0; p < 4; ++p) {
    part_bias.push_back(be.gpu->load_weight(f32_vector(
        "b" + std::to_string(p), std::vector<float>(bias_all.begin() + first, bias_all.begin() + first + part_rows[p]))));
    first += part_rows[p];
  }
  auto whole_bias = be.gpu->load_weight(f32_vector("b", bias_all));
  for (int64_t n : {int64_t(1), int64_t(3), int64_t(20)}) {
    CAPTURE(n);
    const bool tiles = n > ragkv::kQuantGemvMaxRows;
    const auto x = random_values(size_t(n * in), ++seed);
    const auto ref = exact_matmul(x, w_all, &bias_all, n, in, out);
    const auto bound = matmul_bounds(x, w_all, &bias_all, ref, n, in, out, tiles);
    Guarded gx = make_guarded(*be.gpu, DType::f32, n, in, x);
    // Whole, into one output.
    Guarded gy = make_guarded(*be.gpu, DType::f32, n, out, zeros(size_t(n * out)));
    be.gpu->matmul(gx.view, *stack, gy.view, whole_bias.get());
    expect_within(read_guarded(*be.gpu, gy), ref, bound, kMatmulMaxNmse);
    // Split: each part's columns of ref.
    std::vector<Guarded> outs;
    std::vector<Tensor> views;
    for (size_t p = 0; p < 4; ++p) {
      outs.push_back(make_guarded(*be.gpu, DType::f32, n, part_rows[p], zeros(size_t(n * part_rows[p]))));
      views.push_back(outs.back().view);
    }
    const Weight* biases[] = {part_bias[0].get(), part_bias[1].get(), part_bias[2].get(), part_bias[3].get()};
    be.gpu->matmul_parts(gx.view, *stack, views, biases);
    expect_parts_within(*be.gpu, outs, part_rows, ref, bound, n, out);
  }

  // A matrix larger than one f16 tile (2^25 values): a prefill over tile boundaries.
  {
    const int64_t big_in = 4096, big_out = 8200;  // 33.6 M values: two tiles
    const auto bytes = random_matrix_bytes(GgmlType::Q4_K, big_out, big_in, ++seed);
    const auto w = dequantized(GgmlType::Q4_K, big_out, big_in, bytes);
    auto gw = be.gpu->load_weight(matrix_tensor("output.weight", GgmlType::Q4_K, big_out, big_in, bytes));
    const int64_t n = 12;
    const auto x = random_values(size_t(n * big_in), ++seed);
    Guarded gx = make_guarded(*be.gpu, DType::f32, n, big_in, x);
    Guarded gy = make_guarded(*be.gpu, DType::f32, n, big_out, zeros(size_t(n * big_out)));
    be.gpu->matmul(gx.view, *gw, gy.view);
    const auto ref = exact_matmul(x, w, nullptr, n, big_in, big_out);
    expect_within(read_guarded(*be.gpu, gy), ref, matmul_bounds(x, w, nullptr, ref, n, big_in, big_out, true),
                  kMatmulMaxNmse);
  }
}

// f16 matrices times at most kQuantGemvMaxRows rows go through the f16 GEMV (f32 activations,
// exact f16 weights: held to the f32 bound, which the f16-rounded GEMM path would not meet);
// rows not of whole 8-value groups, and more rows, through cuBLAS (the f16-operand bound).
TEST_CASE("cuda: f16 matmul (GEMV up to kQuantGemvMaxRows rows) within its bounds of the exact product") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 2600;
  for (const int64_t in : {int64_t(576), int64_t(4096), int64_t(100)}) {
    const int64_t out = 131;
    CAPTURE(in);
    const auto bytes = random_matrix_bytes(GgmlType::F16, out, in, ++seed);
    const auto w = dequantized(GgmlType::F16, out, in, bytes);
    auto gw = be.gpu->load_weight(matrix_tensor("blk.0.ffn_up.weight", GgmlType::F16, out, in, bytes));
    const auto bias = random_values(size_t(out), ++seed, -0.5f, 0.5f);
    auto gb = be.gpu->load_weight(f32_vector("blk.0.ffn_up.bias", bias));
    for (int64_t n = 1; n <= ragkv::kQuantGemvMaxRows + 2; ++n) {
      CAPTURE(n);
      const bool gemv = n <= ragkv::kQuantGemvMaxRows && in % 8 == 0;
      const auto x = random_values(size_t(n * in), ++seed);
      Guarded gx = make_guarded(*be.gpu, DType::f32, n, in, x);
      Guarded gy = make_guarded(*be.gpu, DType::f32, n, out, zeros(size_t(n * out)));
      be.gpu->matmul(gx.view, *gw, gy.view, gb.get());
      const auto ref = exact_matmul(x, w, &bias, n, in, out);
      expect_within(read_guarded(*be.gpu, gy), ref, matmul_bounds(x, w, &bias, ref, n, in, out, !gemv),
                    kMatmulMaxNmse);
    }
  }
  // A stack of f16 parts into their own outputs, with biases: the GEMV writes the whole, then the
  // split (2 rows); the GEMM writes each part in place (20 rows).
  const int64_t in = 256, part_rows[] = {48, 16, 16};
  std::vector<std::vector<uint8_t>> part_bytes;
  std::vector<ragkv::GgufTensor> tensors;
  std::vector<float> w_all;
  for (size_t p = 0; p < 3; ++p) part_bytes.push_back(random_matrix_bytes(GgmlType::F16, part_rows[p], in, ++seed));
  for (size_t p = 0; p < 3; ++p) {
    tensors.push_back(matrix_tensor("blk.0.part" + std::to_string(p), GgmlType::F16, part_rows[p], in, part_bytes[p]));
    const auto wp = dequantized(GgmlType::F16, part_rows[p], in, part_bytes[p]);
    w_all.insert(w_all.end(), wp.begin(), wp.end());
  }
  const ragkv::GgufTensor* ptrs[] = {&tensors[0], &tensors[1], &tensors[2]};
  auto stack = be.gpu->load_weight_stack(ptrs, "blk.0.attn_qkv");
  const int64_t out = 80;
  const auto bias_all = random_values(size_t(out), ++seed, -0.5f, 0.5f);
  std::vector<std::unique_ptr<Weight>> part_bias;
  for (int64_t p = 0, first = 0; p < 3; first += part_rows[p], ++p)
    part_bias.push_back(be.gpu->load_weight(f32_vector(
        "b" + std::to_string(p), std::vector<float>(bias_all.begin() + first, bias_all.begin() + first + part_rows[p]))));
  for (const int64_t n : {int64_t(2), int64_t(20)}) {
    CAPTURE(n);
    const auto x = random_values(size_t(n * in), ++seed);
    const auto ref = exact_matmul(x, w_all, &bias_all, n, in, out);
    const auto bound = matmul_bounds(x, w_all, &bias_all, ref, n, in, out, n > ragkv::kQuantGemvMaxRows);
    Guarded gx = make_guarded(*be.gpu, DType::f32, n, in, x);
    std::vector<Guarded> outs;
    std::vector<Tensor> views;
    for (size_t p = 0; p < 3; ++p) {
      outs.push_back(make_guarded(*be.gpu, DType::f32, n, part_rows[p], zeros(size_t(n * part_rows[p]))));
      views.push_back(outs.back().view);
    }
    const Weight* biases[] = {part_bias[0].get(), part_bias[1].get(), part_bias[2].get()};
    be.gpu->matmul_parts(gx.view, *stack, views, biases);
    expect_parts_within(*be.gpu, outs, part_rows, ref, bound, n, out);
  }
}

TEST_CASE("cuda: embed of a quantised table equals the CPU backend's, bit for bit") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 1700;
  for (GgmlType type : kWeightTypes) {
    if (!ragkv::quant_decode::device_decodable(type)) continue;
    const std::string type_name = ragkv::ggml_type_name(type);
    CAPTURE(type_name);
    const int64_t vocab = 300, dim = ragkv::ggml_block_elems(type) == 256 ? 2304 : 1056;
    const auto bytes = random_matrix_bytes(type, vocab, dim, ++seed);
    const WeightPair w = load_both(be, matrix_tensor("token_embd.weight", type, vocab, dim, bytes));
    for (float scale : kEmbedScales) {
      CAPTURE(scale);
      auto ids = random_rows(65, vocab, ++seed);
      ids[0] = int32_t(vocab - 1);
      const Results r = run_both(be, {output(DType::f32, 65, dim, zeros(size_t(65 * dim)))},
                                 [&](Backend& b, const std::vector<Tensor>& t) { b.embed(w.on(b), ids, t[0], scale); });
      expect_close(r.gpu[0], r.cpu[0], 0.f);
    }
  }
}

TEST_CASE("cuda: matmul rows beyond the f16 range are scaled, not overflowed, and NaN propagates") {
  if (gpu_missing()) return;
  Backends be;
  const int64_t n = 6, in = 1100, out = 40;
  auto x = random_values(size_t(n * in), 900);
  for (int64_t c = 0; c < in; ++c) x[0 * in + c] *= 1e5f;  // every value of row 0 up to 2e5
  x[1 * in + 17] = 1e6f;                                    // one huge value in row 1
  x[2 * in + 3] = -65505.f;                                 // just past the f16 maximum
  x[3 * in + 3] = 65504.f;                                  // the f16 maximum itself: not scaled
  x[4 * in + 500] = std::numeric_limits<float>::quiet_NaN();
  // Row 5 stays ordinary.
  const auto wv = random_values(size_t(out * in), 901, -1.f, 1.f);
  const WeightPair w = load_both(be, f32_matrix("blk.0.ffn_down.weight", out, in, wv));
  const Results r = run_both(be, {input(DType::f32, n, in, x), output(DType::f32, n, out, zeros(size_t(n * out)))},
                             [&](Backend& b, const std::vector<Tensor>& t) { b.matmul(t[0], w.on(b), t[1]); });
  const std::vector<float>& ref = r.cpu[1];
  for (int64_t j = 0; j < out; ++j) REQUIRE(std::isnan(ref[4 * out + j]));
  const auto bound = matmul_bounds(x, wv, nullptr, ref, n, in, out, true);
  expect_within(r.gpu[1], ref, bound, kMatmulMaxNmse);
}

TEST_CASE("cuda: gather_rows and scatter_rows match the CPU backend") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 1000;
  for (int64_t cols : kCols) {
    for (size_t n : kRowCounts) {
      CAPTURE(cols);
      CAPTURE(n);
      const int64_t src_rows = int64_t(n) + 5;

      // Gather: rows in any order, repeats allowed.
      const auto src = random_values(size_t(src_rows * cols), ++seed);
      auto rows = random_rows(n, src_rows, ++seed);
      rows[0] = int32_t(src_rows - 1);
      const Results g = run_both(be, {input(DType::f32, src_rows, cols, src), output(DType::f32, int64_t(n), cols, zeros(n * size_t(cols)))},
                                 [&](Backend& b, const std::vector<Tensor>& t) { b.gather_rows(t[0], t[1], rows); });
      expect_close(g.gpu[1], g.cpu[1], 0.f);

      // Scatter into f32 and f16 destinations that already hold values (rows not written must
      // keep them): distinct rows in random order, then rows with repeats (the last write wins).
      for (DType dt : {DType::f32, DType::f16}) {
        for (bool repeats : {false, true}) {
          const std::string dtype = ragkv::dtype_name(dt);
          CAPTURE(dtype);
          CAPTURE(repeats);
          const int64_t dst_rows = 2 * int64_t(n) + 3;
          const auto dst = random_values(size_t(dst_rows * cols), ++seed);
          auto values = random_values(n * size_t(cols), ++seed);
          // Values f16 rounds to inf, to subnormals, and to ties.
          values[0] = 70000.f;
          if (values.size() > 3) {
            values[1] = -1e6f;
            values[2] = 3e-7f;
            values[3] = 1.f + std::ldexp(1.f, -11);  // halfway between two f16: ties to even
          }
          const auto dst_idx = repeats ? random_rows(n, dst_rows, ++seed) : distinct_rows(n, dst_rows, ++seed);
          const Results s = run_both(be, {input(DType::f32, int64_t(n), cols, values), output(dt, dst_rows, cols, dst)},
                                     [&](Backend& b, const std::vector<Tensor>& t) { b.scatter_rows(t[0], t[1], dst_idx); });
          expect_close(s.gpu[1], s.cpu[1], 0.f, /*ref_must_be_finite=*/dt == DType::f32);
          // K and V in one launch (scatter_kv_rows): each as its own scatter_rows writes it.
          const auto values_v = random_values(n * size_t(cols), ++seed);
          const auto dst_v = random_values(size_t(dst_rows * cols), ++seed);
          const Results kv = run_both(
              be, {input(DType::f32, int64_t(n), cols, values), input(DType::f32, int64_t(n), cols, values_v),
                   output(dt, dst_rows, cols, dst), output(dt, dst_rows, cols, dst_v)},
              [&](Backend& b, const std::vector<Tensor>& t) { b.scatter_kv_rows(t[0], t[1], t[2], t[3], dst_idx); });
          expect_close(kv.gpu[2], kv.cpu[2], 0.f, /*ref_must_be_finite=*/dt == DType::f32);
          expect_close(kv.gpu[3], kv.cpu[3], 0.f, /*ref_must_be_finite=*/dt == DType::f32);
        }
      }
    }
  }
  // Every write to the same row: only the last survives, also when the repeats are not adjacent.
  const int64_t cols = 5;
  const auto values = random_values(4 * cols, ++seed);
  const std::vector<int32_t> same = {2, 0, 2, 2};
  const Results s = run_both(be, {input(DType::f32, 4, cols, values), output(DType::f32, 3, cols, zeros(15))},
                             [&](Backend& b, const std::vector<Tensor>& t) { b.scatter_rows(t[0], t[1], same); });
  expect_close(s.gpu[1], s.cpu[1], 0.f);
}

TEST_CASE("cuda: row_sq_dist matches the CPU backend (f32 and f16 rows)") {
  if (gpu_missing()) return;
  Backends be;
  uint32_t seed = 1100;
  for (DType dt : {DType::f32, DType::f16}) {
    for (int64_t cols : kCols) {
      for (int64_t n : kSqDistRows) {
        const std::string dtype = ragkv::dtype_name(dt);
        CAPTURE(dtype);
        CAPTURE(cols);
        CAPTURE(n);
        const int64_t b_rows = n + 3;
        const auto a = random_values(size_t(n * cols), ++seed);
        auto others = round_to(dt, random_values(size_t(b_rows * cols), ++seed));  // b
        auto rows = random_rows(size_t(n), b_rows, ++seed);
        rows[0] = int32_t(b_rows - 1);
        // One exact match (distance 0).
        for (int64_t c = 0; c < cols; ++c) others[rows[0] * cols + c] = round_to(dt, {a[c]})[0];
        const Results r = run_both(be,
                                   {input(DType::f32, n, cols, a), input(dt, b_rows, cols, others),
                                    output(DType::f32, n, 1, std::vector<float>(size_t(n), -1.f))},
                                   [&](Backend& b, const std::vector<Tensor>& t) { b.row_sq_dist(t[0], t[1], rows, t[2]); });
        expect_close(r.gpu[2], r.cpu[2], kTolF32);
        if (dt == DType::f32) CHECK(r.gpu[2][0] == 0.f);
      }
    }
  }
}

// CudaBackend::attention (positions and segment boundaries staged, segment mass read back) against
// the CPU on the selective-recompute layout: query rows at scattered positions over KV rows whose
// positions are not sorted. f16 K/V go to the tensor-core attention and its segment-mass pass
// (cuda/attention-segment-mass.cu), held to the bounds derived from f16 rounding for the output
// (tests/attention-f16-bound.h) and each row, head and segment's mass
// (tests/attention-mass-f16-bound.h). The kernels themselves are covered case by case in
// tests/test-cuda-attention.cpp.
TEST_CASE("cuda: attention through the backend matches the CPU (scattered rows, sliding window, segment mass)") {
  if (gpu_missing()) return;
  using namespace ragkv::test;
  auto gpu = ragkv::make_cuda_backend(0);
  uint32_t seed = 4000;
  for (const int window : kAttentionWindows) {
    CAPTURE(window);
    const AttentionProblem p = make_problem({"scattered rows", 64, 6, 2, 37, 300, true, window}, seed++);
    const int64_t qc = int64_t(p.n_head) * p.head_dim, kvc = int64_t(p.n_kv_head) * p.head_dim;
    const Tensor q = make_tensor(*gpu, DType::f32, p.n_q, qc, p.q);
    const Tensor k = make_tensor(*gpu, DType::f16, p.n_kv, kvc, p.k), v = make_tensor(*gpu, DType::f16, p.n_kv, kvc, p.v);
    const Tensor o = gpu->alloc(DType::f32, p.n_q, qc);
    const std::vector<int64_t> segs = {0, 100, 250, p.n_kv};
    std::vector<float> mass;
    ragkv::SegmentMass sm{segs, &mass};
    gpu->attention(q, p.q_pos, k, v, p.k_pos, p.n_kv, p.params(), o, &sm);
    const BoundCheck out = check_against_bound(download_values(*gpu, o), cpu_attention(p), attention_f16_bound(p));
    CHECK(out.nonfinite == 0);
    CHECK(out.over == 0);
    CHECK(out.nmse <= kMmaNmse);
    const std::vector<float> ref = cpu_segment_mass(p, segs);
    REQUIRE(mass.size() == ref.size());
    const BoundCheck m = check_against_bound(mass, ref, segment_mass_f16_bound(p, segs));
    MESSAGE("window " << window << ": output worst / bound " << out.worst_ratio << ", mass worst / bound " << m.worst_ratio);
    CHECK(m.nonfinite == 0);
    CHECK(m.over == 0);
  }
}

// Attention told the decode product that reads its output next (NextProduct: a decode step's O
// projection) quantises the output in split-K's combine (cuda/attention-decode.cu), and the product
// takes those blocks: the output and the product must be the unhinted ones bit for bit — head
// sizes 32 to 256 (one to eight heads per 256-value block), 32- and 256-value blocks, one and two
// query rows, one key range and several. With more than 8 query vectors per KV head (the
// tensor-core kernel, no combine) the blocks are not made.
TEST_CASE("cuda: attention with the next product named prepares that product's operand, bit for bit") {
  if (gpu_missing()) return;
  using namespace ragkv::test;
  Backends be;
  const auto& cuda = static_cast<const ragkv::CudaBackend&>(*be.gpu);
  const auto block8 = ragkv::Activations::block8;
  struct Case {
    ProblemSpec spec;
    GgmlType type;
    bool split;  // at most 8 query vectors per KV head: split-K
  };
  const Case cases[] = {{{"8B shape", 128, 32, 8, 1, 700}, GgmlType::Q4_K, true},
                        {{"head 64, two rows", 64, 8, 2, 2, 1100}, GgmlType::Q4_K, true},
                        {{"head 32, eight heads a block", 32, 16, 4, 1, 300}, GgmlType::Q6_K, true},
                        {{"head 256", 256, 4, 1, 1, 520}, GgmlType::Q4_K, true},
                        {{"legacy blocks", 128, 8, 8, 1, 400}, GgmlType::Q4_0, true},
                        {{"window", 64, 8, 8, 1, 900, false, 128}, GgmlType::Q8_0, true},
                        {{"one key range", 64, 8, 2, 1, 100}, GgmlType::Q4_K, true},
                        {{"tensor cores", 128, 8, 2, 3, 200}, GgmlType::Q4_K, false}};
  uint32_t seed = 5300;
  for (const Case& c : cases) {
    CAPTURE(c.spec.what);
    const AttentionProblem p = make_problem(c.spec, seed++);
    const int64_t qc = int64_t(p.n_head) * p.head_dim, kvc = int64_t(p.n_kv_head) * p.head_dim;
    const Tensor q = make_tensor(*be.gpu, DType::f32, p.n_q, qc, p.q);
    const Tensor k = make_tensor(*be.gpu, DType::f16, p.n_kv, kvc, p.k), v = make_tensor(*be.gpu, DType::f16, p.n_kv, kvc, p.v);
    const auto wo_bytes = random_matrix_bytes(c.type, 256, qc, ++seed);
    const std::unique_ptr<Weight> wo = be.gpu->load_weight(matrix_tensor("blk.0.attn_output.weight", c.type, 256, qc, wo_bytes));
    const auto run = [&](bool hint) {
      const Tensor o = be.gpu->alloc(DType::f32, p.n_q, qc), y = be.gpu->alloc(DType::f32, p.n_q, 256);
      be.gpu->attention(q, p.q_pos, k, v, p.k_pos, p.n_kv, p.params(), o, nullptr,
                        hint ? ragkv::NextProduct{wo.get(), block8} : ragkv::NextProduct{});
      be.gpu->matmul(o, *wo, y, nullptr, block8);
      return std::vector<std::vector<float>>{download_values(*be.gpu, o), download_values(*be.gpu, y)};
    };
    const int64_t used = cuda.prepared_operands_used();
    const auto hinted = run(true);
    CHECK(cuda.prepared_operands_used() - used == (c.split ? 1 : 0));
    CHECK(hinted == run(false));
  }
}

// Key totals (SegmentMass::key_totals, prophet's question attention) through the backend: f16 K/V
// go to the tensor-core attention and its key-total pass (cuda/attention-key-mass.cu), held to the
// bounds derived from f16 rounding for the output (tests/attention-f16-bound.h) and each key's
// total (tests/attention-mass-f16-bound.h) against the CPU: the question's rows alone (first_query 0)
// and a layer's rows with the question's last (first_query > 0: prophet's first pass). Both
// layouts prophet meets (the question at the end of an ascending prompt, scattered recomputed
// rows), GQA, a sliding window, softcap. Deferred: two calls pending at once, copied back by
// synchronize(), give the same totals bit for bit (the pass has no atomics).
TEST_CASE("cuda: attention key totals within the derived f16 bound (question rows over the whole prompt)") {
  if (gpu_missing()) return;
  using namespace ragkv::test;
  auto gpu = ragkv::make_cuda_backend(0);
  struct KtCase {
    ProblemSpec spec;
    int64_t first_row;
  };
  const KtCase cases[] = {
      {{"question over a prompt, GQA 4", 64, 8, 2, 12, 1500}, 0},
      {{"8B shape, a layer's rows with the question last", 128, 32, 8, 60, 2100}, 20},
      {{"recompute rows, window 96", 32, 4, 4, 9, 700, true, 96}, 0},
      {{"Gemma 3 shape, shuffled keys, softcap", 256, 8, 1, 30, 333, true, 0, 2.f}, 27},
  };
  uint32_t seed = 4100;
  for (const KtCase& kc : cases) {
    CAPTURE(kc.spec.what);
    const AttentionProblem p = make_problem(kc.spec, seed++);
    const int64_t qc = int64_t(p.n_head) * p.head_dim, kvc = int64_t(p.n_kv_head) * p.head_dim;
    const Tensor q = make_tensor(*gpu, DType::f32, p.n_q, qc, p.q);
    const Tensor k = make_tensor(*gpu, DType::f16, p.n_kv, kvc, p.k), v = make_tensor(*gpu, DType::f16, p.n_kv, kvc, p.v);
    const Tensor o = gpu->alloc(DType::f32, p.n_q, qc);
    const ragkv::AttentionParams ap = p.params();
    std::vector<float> totals;
    ragkv::SegmentMass sm;
    sm.key_totals = true;
    sm.first_query = kc.first_row;
    sm.out = &totals;
    gpu->attention(q, p.q_pos, k, v, p.k_pos, p.n_kv, ap, o, &sm);

    const BoundCheck out = check_against_bound(download_values(*gpu, o), cpu_attention(p), attention_f16_bound(p));
    CHECK(out.nonfinite == 0);
    CHECK(out.over == 0);
    CHECK(out.nmse <= kMmaNmse);
    REQUIRE(totals.size() == size_t(p.n_kv));
    const BoundCheck tot = check_against_bound(totals, cpu_key_totals(p, kc.first_row), key_totals_f16_bound(p, kc.first_row));
    MESSAGE(kc.spec.what << ": output worst / bound " << out.worst_ratio << ", totals worst / bound " << tot.worst_ratio);
    CHECK(tot.nonfinite == 0);
    CHECK(tot.over == 0);
    // Every query sees a key here, so the totals add up to one per counted query row and head.
    double sum = 0;
    for (float t : totals) sum += t;
    CHECK(sum == doctest::Approx(double((p.n_q - kc.first_row) * p.n_head)).epsilon(1e-4));

    std::vector<float> later[2];
    for (std::vector<float>& t : later) {
      ragkv::SegmentMass d = sm;
      d.deferred = true;
      d.out = &t;
      gpu->attention(q, p.q_pos, k, v, p.k_pos, p.n_kv, ap, o, &d);
      REQUIRE(t.size() == size_t(p.n_kv));
    }
    gpu->synchronize();
    for (const std::vector<float>& t : later) CHECK(t == totals);
  }
}

// The shared misuse table of tests/test-backend-validation.cpp runs on this backend too; these
// are the cases the CUDA backend has been caught on before, kept here beside its ops.
// RAGKV_CUDA_WEIGHTS=quant+f16: prefill products on the f16 copy equal those of weights converted to
// f16 at load (RAGKV_CUDA_WEIGHTS=f16), decode steps those of weights kept quantised, bit for bit.
TEST_CASE("cuda: quant+f16 weights multiply prefill rows as f16 weights and decode rows as quantised ones") {
  if (gpu_missing()) return;
  const int64_t in = 512;
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q6_K};
  const int64_t part_rows[] = {40, 24};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ragkv::GgufTensor> tensors;
  for (size_t p = 0; p < 2; ++p) bytes.push_back(random_matrix_bytes(types[p], part_rows[p], in, 7300 + uint32_t(p)));
  for (size_t p = 0; p < 2; ++p)
    tensors.push_back(matrix_tensor("blk.0.part" + std::to_string(p), types[p], part_rows[p], in, bytes[p]));
  const ragkv::GgufTensor* ptrs[] = {&tensors[0], &tensors[1]};
  // Each policy's product of n rows (split into the two parts, then concatenated).
  const auto product = [&](const char* policy, int64_t n, ragkv::Activations act) {
    const ragkv::test::ScopedEnv env("RAGKV_CUDA_WEIGHTS", policy);
    auto gpu = ragkv::make_cuda_backend(0);
    CHECK(gpu->kernels().find(std::string("+") + policy + "-weights") != std::string::npos);
    auto w = gpu->load_weight_stack(ptrs, "blk.0.attn_qkv", ragkv::WeightMemory::kernel_layout);  // as a model's
    CHECK(ragkv::cuda_weight(*w).has_f16() == (std::string(policy) != "quant"));  // the copy, or f16 weights
    const Tensor x = make_tensor(*gpu, DType::f32, n, in, random_values(size_t(n * in), 7400 + uint32_t(n)));
    const Tensor outs[2] = {gpu->alloc(DType::f32, n, part_rows[0]), gpu->alloc(DType::f32, n, part_rows[1])};
    gpu->matmul_parts(x, *w, outs, {}, act);
    std::vector<float> y = download_values(*gpu, outs[0]);
    const std::vector<float> y1 = download_values(*gpu, outs[1]);
    y.insert(y.end(), y1.begin(), y1.end());
    return y;
  };
  CHECK(product("quant+f16", 20, ragkv::Activations::f32) == product("f16", 20, ragkv::Activations::f32));
  CHECK(product("quant+f16", 2, ragkv::Activations::block8) == product("quant", 2, ragkv::Activations::block8));
  CHECK(product("quant+f16", 3, ragkv::Activations::f32) == product("quant", 3, ragkv::Activations::f32));
}

// Small uploads (row indices, positions, token ids) go through a pinned ring (CudaBackend::
// eager_source), reused only once the stream has run the copies from it, and grown while the
// copies from a full one may still be pending. Here the ring is 2 KiB (8 uploads) — fixed, so
// that the host must wait for the stream every 8 uploads, or growing to 64 KiB, so that hundreds
// of uploads are queued — and the stream is held back by large copies queued first, so the
// gathers, each uploading its row index, queue ahead of the device: a slice reused or a ring
// freed before its copy ran would hand a gather another's row.
TEST_CASE("cuda: uploads queued ahead of the device keep their own bytes through the pinned ring's reuse and growth") {
  if (gpu_missing()) return;
  for (const size_t max_ring : {size_t(2048), size_t(64) << 10}) {
    CAPTURE(max_ring);
    auto backend = ragkv::make_cuda_backend(0);
    auto* gpu = dynamic_cast<ragkv::CudaBackend*>(backend.get());
    REQUIRE(gpu != nullptr);
    gpu->set_upload_ring_sizes(2048, max_ring);
    constexpr int64_t kRows = 16, kCols = 4, kCalls = 2000;
    std::vector<float> table(size_t(kRows * kCols));
    for (size_t i = 0; i < table.size(); ++i) table[i] = float(i);
    const Tensor t = make_tensor(*gpu, DType::f32, kRows, kCols, table);
    const Tensor out = gpu->alloc(DType::f32, kCalls, kCols);
    const Tensor big_a = gpu->alloc(DType::f32, int64_t(1) << 16, 4096), big_b = gpu->alloc(DType::f32, int64_t(1) << 16, 4096);
    gpu->fill_zero(big_a);
    for (int i = 0; i < 8; ++i) gpu->copy(i % 2 ? big_b : big_a, i % 2 ? big_a : big_b);  // 8 × 1 GiB: the device is busy
    for (int64_t i = 0; i < kCalls; ++i) {
      const int32_t row[1] = {int32_t((i * 7) % kRows)};
      gpu->gather_rows(t, out.slice_rows(i, 1), row);
    }
    const std::vector<float> got = download_values(*gpu, out);
    int64_t wrong = 0;
    for (int64_t i = 0; i < kCalls; ++i)
      for (int64_t c = 0; c < kCols; ++c) wrong += got[size_t(i * kCols + c)] != table[size_t(((i * 7) % kRows) * kCols + c)];
    CHECK(wrong == 0);
  }
}

TEST_CASE("cuda: misuse of the ops fails loudly") {
  if (gpu_missing()) return;
  Backends be;
  auto& gpu = *be.gpu;
  const std::vector<float> vec(64, 1.f);
  auto w = gpu.load_weight(f32_vector("output_norm.weight", vec));
  const std::vector<float> mat(4 * 64, 0.5f);
  auto m = gpu.load_weight(f32_matrix("blk.0.attn_q.weight", 4, 64, mat));

  Tensor x = gpu.alloc(DType::f32, 2, 64);
  Tensor y = gpu.alloc(DType::f32, 2, 64);
  Tensor y4 = gpu.alloc(DType::f32, 2, 4);
  Tensor kv = gpu.alloc(DType::f16, 4, 64);
  gpu.fill_zero(x);
  const std::vector<int32_t> ids = {0, 1};
  ragkv::AttentionParams ap;
  ap.n_head = ap.n_kv_head = 1;
  ap.head_dim = 64;
  ap.scale = 0.125f;
  CHECK_NOTHROW(gpu.attention(x, ids, kv, kv, ids, 2, ap, y));
  CHECK_THROWS_AS(gpu.attention(x, ids, kv, kv, ids, 2, ap, y4), ragkv::Error);  // out of 4 columns
  CHECK_THROWS_AS(gpu.attention(x, ids, kv, kv, ids, 5, ap, y), ragkv::Error);   // 5 keys in a 4-row cache

  // Shapes that do not fit, a weight of another backend, a matrix where a vector belongs.
  CHECK_THROWS_AS(gpu.matmul(x, *m, y), ragkv::Error);       // y has 64 columns, not 4
  CHECK_THROWS_AS(gpu.matmul(y4, *m, y4), ragkv::Error);     // x has 4 columns, not 64
  CHECK_THROWS_AS(gpu.matmul(x, *m, y4, w.get()), ragkv::Error);  // bias of 64 for 4 outputs
  CHECK_NOTHROW(gpu.matmul(x, *m, y4));
  CHECK_THROWS_AS(gpu.rms_norm(x, *m, 1e-6f, y), ragkv::Error);  // 4·64 values, and f16
  CHECK_THROWS_AS(gpu.layer_norm(x, *w, *m, 1e-6f, y), ragkv::Error);
  CHECK_THROWS_AS(gpu.embed(*m, ids, y4, 1.f), ragkv::Error);               // rows of 64, not 4
  CHECK_THROWS_AS(gpu.embed(*m, ids, x.slice_rows(0, 1), 1.f), ragkv::Error);  // 2 ids, 1 row
  CHECK_THROWS_AS(gpu.gather_rows(x, x, ids), ragkv::Error);  // overlapping source and output
  CHECK_THROWS_AS(gpu.scatter_rows(x, x, ids), ragkv::Error);
  CHECK_THROWS_AS(gpu.row_sq_dist(x, kv, ids, y), ragkv::Error);  // out must be [2][1]
  auto w_cpu = be.cpu->load_weight(f32_vector("output_norm.weight", vec));
  CHECK_THROWS_AS(gpu.rms_norm(x, *w_cpu, 1e-6f, y), ragkv::Error);
  CHECK_THROWS_AS(gpu.matmul(x, *w_cpu, y), ragkv::Error);
  Tensor z = gpu.alloc(DType::f32, 3, 64);
  CHECK_THROWS_AS(gpu.add(x, z), ragkv::Error);
  CHECK_THROWS_AS(gpu.swiglu(x, y, z), ragkv::Error);
  CHECK_THROWS_AS(gpu.gelu_erf(x, z), ragkv::Error);

  // Rows outside the tensors fail on the host.
  Tensor src = gpu.alloc(DType::f32, 2, 5), dst = gpu.alloc(DType::f32, 3, 5);
  const std::vector<int32_t> outside = {0, 3};
  CHECK_THROWS_AS(gpu.gather_rows(dst, src, outside), ragkv::Error);
  CHECK_THROWS_AS(gpu.scatter_rows(src, dst, outside), ragkv::Error);
  const std::vector<int32_t> negative = {0, -1};
  CHECK_THROWS_AS(gpu.scatter_rows(src, dst, negative), ragkv::Error);
}

#endif  // RAGKV_HAVE_CUDA
