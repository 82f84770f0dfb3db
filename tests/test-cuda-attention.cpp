// The CUDA attention kernels (cuda/attention.cu and the kernels it routes to) against the CPU
// reference backend (Backend::attention in core/backend/cpu-backend.cpp), DESIGN.md §3 and §4.
// The f32 kernel and split-K are held to 5e-5 (below); the tensor-core kernel, its key-total and
// segment-mass passes and its key-range split to bounds derived from f16 rounding
// (tests/attention-f16-bound.h, tests/attention-mass-f16-bound.h), over head_dim 32–256, GQA,
// windows, softcap, non-causal calls and up to 6,000 keys.
//
// attention_cuda runs on device buffers made here with cudaMalloc/cudaMemcpy, the CPU backend on
// the same inputs (f16 K/V rounded once on the host, so both start from the same bits), over a
// table of cases: head_dim 32/64/128/256, GQA ratios 1, 3, 4, 8, 1 to 300 query rows against up
// to 2000 keys, f16 and f32 K/V, causal prefill with ascending positions, selective recompute
// (key rows in shuffled position order, queries a subset of the prompt's rows at arbitrary
// positions), sliding windows, softcap, non-causal encoders, queries that see no key, no keys at
// all, per-segment attention mass, and the split-K decode path (few query vectors per KV head,
// which takes every such call).
//
// Tolerance, element-wise on the output and the segment mass:
//   |cuda − cpu| ≤ 5e-5 · (1 + |cpu|)
// Both sides compute in f32 from the same inputs, in different orders (SGEMM vs sequential dot
// products, a two-pass softmax vs an online one that rescales its running sums, P normalised
// before vs after P·V, the CPU's vectorised exp vs CUDA's expf). With q ∈ [−4, 4], k ∈ [−1, 1]
// and scale 1/√head_dim the logits have a standard deviation ≈ 1.3, so probabilities spread over
// e^±4 and a wrong mask or index moves the output by 1e-2 or more. A logit's rounding error is
// about 2⁻²⁴ · √head_dim · |partial sums| · scale ≈ 2e-6 for head_dim 256; it moves a
// probability by the same relative amount and the output (v ∈ [−2, 2], a convex combination)
// by ≲ 4 · 2e-6; the sums over ≤ 2000 keys add ≈ √2000 · 2⁻²⁴ ≈ 3e-6 relative. The largest
// error seen over this table in a CPU emulation of the kernel (same code, host expf) was 1e-6,
// so 5e-5 leaves a margin of 50 and stays far below any masking or indexing error. Outputs
// must be finite; a query that sees no key must give exactly 0 (and segment mass 0) on both
// sides.
// Outputs sit between guard rows that must come back untouched, and the K/V rows past n_kv hold
// NaN, so reading them would show.
//
// Without a GPU the comparison cases say they are skipped and return (doctest has no run-time
// skip); the argument checks run everywhere, as they fail before touching the device.
#ifdef RAGKV_HAVE_CUDA

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <tuple>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/util/error.h"
#include "core/format/fp16.h"
#include "cuda/attention-key-mass.cuh"
#include "cuda/attention-mma.cuh"
#include "cuda/attention-segment-mass.cuh"
#include "cuda/attention.cuh"
#include "cuda/key-tile-bounds.h"
#include "cuda/cuda-backend.h"
#include "tests/attention-f16-bound.h"
#include "tests/attention-mass-f16-bound.h"
#include "tests/cuda-device-buffer.h"

namespace {

using ragkv::test::DeviceBuffer;

using ragkv::DType;
using ragkv::Tensor;

constexpr double kTol = 5e-5;
constexpr float kGuard = 1234.f;
constexpr int64_t kGuardRows = 2;  // guard rows before and after each output
constexpr int64_t kNanRows = 3;    // K/V rows past n_kv, filled with NaN

bool gpu_missing() {
  if (ragkv::cuda_device_present()) return false;
  MESSAGE("skipped: no CUDA GPU is present on this machine");
  return true;
}

std::vector<float> random_values(size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// How the positions of key rows and queries are laid out.
enum class Layout : uint8_t {
  prefill,   // keys at base, base + 1, … in row order; queries are the last n_q keys
  chunks,    // selective recompute: key rows are the prompt in runs (chunks) placed in shuffled
             // order with some rows swapped; queries are the prompt's tail plus random rows
  shuffled,  // key positions a random permutation of the prompt; queries random prompt rows
  gapped,    // keys at base + step·j (step 2, or 3 with a window); queries anywhere in
             // [0, last key + 4], so some precede every key or find their window empty
  before,    // keys at base, base + 1, …; every query precedes them (in [0, base))
  encoder,   // non-causal: positions unused
};

struct Case {
  const char* what;
  int head_dim, n_head, n_kv_head;
  int64_t n_q, n_kv;
  bool kv_f16;
  Layout layout;
  int window = 0;
  float softcap = 0.f;
  bool seg = false;
  int32_t base = 0;  // first key position

  bool causal() const { return layout != Layout::encoder; }
};

struct Positions {
  std::vector<int32_t> q, k;
};

Positions make_positions(const Case& c, std::mt19937& rng) {
  Positions p;
  p.k.resize(size_t(c.n_kv));
  std::iota(p.k.begin(), p.k.end(), c.base);
  switch (c.layout) {
    case Layout::prefill:
    case Layout::encoder:
      for (int64_t i = 0; i < c.n_q; ++i) p.q.push_back(c.base + int32_t(c.n_kv - c.n_q + i));
      break;
    case Layout::chunks:
    case Layout::shuffled: {
      // Queries: the prompt's last rows (the question) and random earlier rows, in random order.
      std::vector<int32_t> prompt = p.k;
      const int64_t tail = std::min<int64_t>(c.n_q, 16);
      std::shuffle(prompt.begin(), prompt.end() - tail, rng);
      p.q.assign(prompt.end() - tail, prompt.end());
      p.q.insert(p.q.end(), prompt.begin(), prompt.begin() + (c.n_q - tail));
      std::shuffle(p.q.begin(), p.q.end(), rng);
      if (c.layout == Layout::shuffled) {
        std::shuffle(p.k.begin(), p.k.end(), rng);
        break;
      }
      std::vector<std::vector<int32_t>> runs;
      std::uniform_int_distribution<int64_t> run_len(20, 200);
      for (int64_t j = 0; j < c.n_kv;) {
        const int64_t n = std::min(run_len(rng), c.n_kv - j);
        runs.emplace_back(p.k.begin() + j, p.k.begin() + j + n);
        j += n;
      }
      std::shuffle(runs.begin(), runs.end(), rng);
      p.k.clear();
      for (const auto& r : runs) p.k.insert(p.k.end(), r.begin(), r.end());
      std::uniform_int_distribution<int64_t> row(0, c.n_kv - 1);
      for (int64_t s = 0; s < c.n_kv / 10; ++s) std::swap(p.k[size_t(row(rng))], p.k[size_t(row(rng))]);
      break;
    }
    case Layout::before: {
      std::uniform_int_distribution<int32_t> pos(0, c.base - 1);
      for (int64_t i = 0; i < c.n_q; ++i) p.q.push_back(pos(rng));
      break;
    }
    case Layout::gapped: {
      const int32_t step = c.window > 0 ? 3 : 2;
      for (int64_t j = 0; j < c.n_kv; ++j) p.k[size_t(j)] = c.base + step * int32_t(j);
      std::uniform_int_distribution<int32_t> pos(0, c.base + step * int32_t(c.n_kv) + 4);
      for (int64_t i = 0; i < c.n_q; ++i) p.q.push_back(pos(rng));
      p.q[0] = 0;  // before every key (base > 0 in the table)
      break;
    }
  }
  return p;
}

// Segment boundaries over the key rows: rows before the first and after the last segment, an
// empty segment, and (for some sizes) a last boundary past n_kv, which counts only up to n_kv.
std::vector<int64_t> make_segments(int64_t n_kv, std::mt19937& rng) {
  std::vector<int64_t> b = {std::min<int64_t>(3, n_kv)};
  std::uniform_int_distribution<int64_t> len(1, std::max<int64_t>(1, n_kv / 4));
  while (b.back() + 8 < n_kv) b.push_back(std::min(n_kv, b.back() + len(rng)));
  b.insert(b.begin() + 1, b[0]);  // an empty segment
  b.push_back(n_kv % 2 == 0 ? n_kv - std::min<int64_t>(2, n_kv) : n_kv + 5);
  std::sort(b.begin(), b.end());
  return b;
}

// Query rows that see no key (their outputs and masses must be exactly 0).
std::vector<bool> sees_nothing(const Case& c, const Positions& p) {
  std::vector<bool> none(size_t(c.n_q), c.n_kv == 0);
  if (!c.causal() || c.n_kv == 0) return none;
  for (int64_t i = 0; i < c.n_q; ++i) {
    const int64_t qp = p.q[size_t(i)];
    none[size_t(i)] = std::none_of(p.k.begin(), p.k.end(), [&](int32_t kp) {
      return kp <= qp && (c.window <= 0 || kp > qp - c.window);
    });
  }
  return none;
}

std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = ragkv::fp32_to_fp16(v[i]);
  return h;
}

// |got − ref| ≤ kTol · (1 + |ref|) element-wise; everything finite.
void expect_close(const std::vector<float>& got, const std::vector<float>& ref, const char* what) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0, nonfinite_got = 0, nonfinite_ref = 0, worst_at = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (!std::isfinite(ref[i])) ++nonfinite_ref;
    if (!std::isfinite(got[i])) {
      ++nonfinite_got;
      continue;
    }
    const double err = std::fabs(double(got[i]) - double(ref[i])) / (1.0 + std::fabs(double(ref[i])));
    if (err > worst) {
      worst = err;
      worst_at = i;
    }
    bad += err > kTol;
  }
  INFO("comparing " << what);
  CAPTURE(worst);
  CAPTURE(worst_at);
  CHECK(nonfinite_ref == 0);
  CHECK(nonfinite_got == 0);
  CHECK(bad == 0);
}

// The values of a buffer of n + 2·guard elements between the guards; checks the guards.
std::vector<float> unguard(const std::vector<float>& all, size_t guard, const char* what) {
  REQUIRE(all.size() >= 2 * guard);
  size_t touched = 0;
  for (size_t i = 0; i < guard; ++i) touched += (all[i] != kGuard) + (all[all.size() - 1 - i] != kGuard);
  INFO("guards of " << what);
  CHECK_MESSAGE(touched == 0, "attention_cuda wrote outside its output");
  return {all.begin() + std::ptrdiff_t(guard), all.end() - std::ptrdiff_t(guard)};
}

void run_case(const Case& c, uint32_t seed) {
  INFO("case: " << c.what << " (head_dim " << c.head_dim << ", heads " << c.n_head << "/" << c.n_kv_head
                << ", n_q " << c.n_q << ", n_kv " << c.n_kv << (c.kv_f16 ? ", f16" : ", f32") << " K/V)");
  std::mt19937 rng(seed);
  const int hd = c.head_dim;
  const int64_t q_cols = int64_t(c.n_head) * hd, kv_cols = int64_t(c.n_kv_head) * hd;
  const int64_t kv_rows = c.n_kv + kNanRows;
  const auto q = random_values(size_t(c.n_q * q_cols), rng, -4.f, 4.f);
  auto k = random_values(size_t(kv_rows * kv_cols), rng, -1.f, 1.f);
  auto v = random_values(size_t(kv_rows * kv_cols), rng, -2.f, 2.f);
  std::fill(k.begin() + c.n_kv * kv_cols, k.end(), std::numeric_limits<float>::quiet_NaN());
  std::fill(v.begin() + c.n_kv * kv_cols, v.end(), std::numeric_limits<float>::quiet_NaN());
  const std::vector<uint16_t> k16 = to_f16(k), v16 = to_f16(v);
  const Positions pos = make_positions(c, rng);
  const std::vector<int64_t> seg_begin = c.seg ? make_segments(c.n_kv, rng) : std::vector<int64_t>{};
  const int n_seg = c.seg ? int(seg_begin.size()) - 1 : 0;
  const float scale = 1.f / std::sqrt(float(hd));

  // CPU reference.
  auto cpu = ragkv::make_cpu_backend(1);
  const DType kv_dt = c.kv_f16 ? DType::f16 : DType::f32;
  Tensor qt = cpu->alloc(DType::f32, c.n_q, q_cols);
  Tensor kt = cpu->alloc(kv_dt, kv_rows, kv_cols), vt = cpu->alloc(kv_dt, kv_rows, kv_cols);
  Tensor ot = cpu->alloc(DType::f32, c.n_q, q_cols);
  cpu->upload(qt, q.data());
  cpu->upload(kt, c.kv_f16 ? static_cast<const void*>(k16.data()) : k.data());
  cpu->upload(vt, c.kv_f16 ? static_cast<const void*>(v16.data()) : v.data());
  ragkv::AttentionParams ap;
  ap.n_head = c.n_head;
  ap.n_kv_head = c.n_kv_head;
  ap.head_dim = hd;
  ap.scale = scale;
  ap.sliding_window = c.window;
  ap.softcap = c.softcap;
  ap.causal = c.causal();
  std::vector<float> ref_mass;
  ragkv::SegmentMass sm;
  sm.seg_begin = seg_begin;
  sm.out = &ref_mass;
  cpu->attention(qt, pos.q, kt, vt, pos.k, c.n_kv, ap, ot, c.seg ? &sm : nullptr);
  std::vector<float> ref(size_t(c.n_q * q_cols));
  cpu->download(ot, ref.data());

  // CUDA, on buffers with guards around the outputs; positions withheld when not causal.
  const size_t n_out = size_t(c.n_q * q_cols), out_guard = size_t(kGuardRows * q_cols);
  const size_t n_mass = size_t(c.n_q * c.n_head * n_seg), mass_guard = 4;
  DeviceBuffer dq(q), dq_pos(pos.q), dk_pos(pos.k), dseg(seg_begin);
  DeviceBuffer dk = c.kv_f16 ? DeviceBuffer(k16) : DeviceBuffer(k);
  DeviceBuffer dv = c.kv_f16 ? DeviceBuffer(v16) : DeviceBuffer(v);
  DeviceBuffer dout(std::vector<float>(n_out + 2 * out_guard, kGuard));
  DeviceBuffer dmass(std::vector<float>(n_mass + 2 * mass_guard, kGuard));
  ragkv::AttentionArgs a;
  a.q = dq.as<float>();
  a.q_pos = c.causal() ? dq_pos.as<int32_t>() : nullptr;
  a.k = dk.as<void>();
  a.v = dv.as<void>();
  a.kv_f16 = c.kv_f16;
  a.k_pos = c.causal() ? dk_pos.as<int32_t>() : nullptr;
  a.n_q = c.n_q;
  a.n_kv = c.n_kv;
  a.n_head = c.n_head;
  a.n_kv_head = c.n_kv_head;
  a.head_dim = hd;
  a.scale = scale;
  a.softcap = c.softcap;
  a.sliding_window = c.window;
  a.causal = c.causal();
  a.out = dout.as<float>() + out_guard;
  // This table holds the f32 kernels (attention.cu's, and split-K's for at most kDecodeMaxVectors
  // vectors per KV head) to 5e-5; the tensor-core one has its own cases.
  a.tensor_cores = false;
  if (c.seg) {
    a.seg_begin = dseg.as<int64_t>();
    a.n_seg = n_seg;
    a.seg_mass = dmass.as<float>() + mass_guard;
  }
  ragkv::attention_cuda(a, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<float> got = unguard(dout.download<float>(n_out + 2 * out_guard), out_guard, "output");
  expect_close(got, ref, "output");

  // A query that sees no key: exactly 0 on both sides.
  const std::vector<bool> none = sees_nothing(c, pos);
  int64_t n_none = 0, nonzero = 0;
  for (int64_t i = 0; i < c.n_q; ++i) {
    if (!none[size_t(i)]) continue;
    ++n_none;
    for (int64_t j = 0; j < q_cols; ++j) {
      nonzero += got[size_t(i * q_cols + j)] != 0.f;
      nonzero += ref[size_t(i * q_cols + j)] != 0.f;
    }
    for (int64_t s = 0; s < c.n_head * n_seg; ++s) nonzero += ref_mass[size_t(i * c.n_head * n_seg + s)] != 0.f;
  }
  CAPTURE(n_none);
  CHECK(nonzero == 0);

  if (c.seg) {
    REQUIRE(ref_mass.size() == n_mass);
    const std::vector<float> mass = unguard(dmass.download<float>(n_mass + 2 * mass_guard), mass_guard, "mass");
    expect_close(mass, ref_mass, "segment mass");
    for (int64_t i = 0; i < c.n_q; ++i)
      if (none[size_t(i)])
        for (int64_t s = 0; s < c.n_head * n_seg; ++s) nonzero += mass[size_t(i * c.n_head * n_seg + s)] != 0.f;
    CHECK(nonzero == 0);
  }
}

void run_cases(std::span<const Case> cases, uint32_t seed) {
  for (const Case& c : cases) run_case(c, seed++);
}

// A problem's inputs on the device as the kernels take them (K/V rows past n_kv hold NaN, the
// key tiles' position bounds as the backend stages them), and the arguments that point at them;
// the caller sets out (and any mass).
struct DeviceProblem {
  DeviceBuffer q, q_pos, k_pos, k, v, bounds;
  ragkv::AttentionArgs args;

  explicit DeviceProblem(const ragkv::test::AttentionProblem& p)
      : q(p.q), q_pos(p.q_pos), k_pos(p.k_pos), k(to_f16(nan_padded(p, p.k))), v(to_f16(nan_padded(p, p.v))),
        bounds(tile_bounds(p)) {
    args.q = q.as<float>();
    args.q_pos = p.causal ? q_pos.as<int32_t>() : nullptr;
    args.k = k.as<void>();
    args.v = v.as<void>();
    args.k_pos = p.causal ? k_pos.as<int32_t>() : nullptr;
    args.k_tile_bounds = p.causal ? bounds.as<int32_t>() : nullptr;
    args.n_q = p.n_q;
    args.n_kv = p.n_kv;
    args.n_head = p.n_head;
    args.n_kv_head = p.n_kv_head;
    args.head_dim = p.head_dim;
    args.scale = p.scale;
    args.softcap = p.softcap;
    args.sliding_window = p.window;
    args.causal = p.causal;
  }

 private:
  static std::vector<float> nan_padded(const ragkv::test::AttentionProblem& p, std::vector<float> x) {
    x.resize(size_t((p.n_kv + kNanRows) * p.n_kv_head * p.head_dim), std::numeric_limits<float>::quiet_NaN());
    return x;
  }
  static std::vector<int32_t> tile_bounds(const ragkv::test::AttentionProblem& p) {
    std::vector<int32_t> b;
    ragkv::append_key_tile_bounds(std::span(p.k_pos).first(size_t(p.n_kv)), b);
    return b;
  }
};

// The tensor-core kernel (attention-mma.cu), called directly or through attention_cuda's routing,
// against the CPU within the derived f16 bound and NMSE limit (tests/attention-f16-bound.h). The
// first three queries are moved before every key (they must give exactly 0); K/V rows past n_kv
// hold NaN and the output sits between guard rows.
void run_mma_case(const ragkv::test::ProblemSpec& s, uint32_t seed, bool through_router, int key_splits = 0) {
  using namespace ragkv::test;
  INFO("case: " << s.what << (through_router ? " (through attention_cuda)" : "") << ", key splits " << key_splits);
  AttentionProblem p = make_problem(s, seed);
  if (p.causal)
    for (int64_t i = 0; i < std::min<int64_t>(3, p.n_q); ++i) p.q_pos[size_t(i)] = -1;
  const std::vector<float> ref = cpu_attention(p);
  const int64_t q_cols = int64_t(p.n_head) * p.head_dim;
  const size_t n_out = size_t(p.n_q * q_cols), out_guard = size_t(kGuardRows * q_cols);
  DeviceProblem dp(p);
  DeviceBuffer dout(std::vector<float>(n_out + 2 * out_guard, kGuard));
  ragkv::AttentionArgs a = dp.args;
  a.out = dout.as<float>() + out_guard;
  a.key_splits = key_splits;
  if (through_router) ragkv::attention_cuda(a, nullptr);
  else ragkv::attention_mma_cuda(a, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<float> got = unguard(dout.download<float>(n_out + 2 * out_guard), out_guard, "output");
  const BoundCheck c = check_against_bound(got, ref, attention_f16_bound(p));
  MESSAGE(std::string(s.what) << ": worst error / bound " << c.worst_ratio << ", NMSE " << c.nmse);
  CHECK(c.nonfinite == 0);
  CHECK(c.over == 0);
  CHECK(c.nmse <= kMmaNmse);
  int64_t nonzero = 0;
  for (int64_t i = 0; i < std::min<int64_t>(3, p.n_q) && p.causal; ++i)
    for (int64_t j = 0; j < q_cols; ++j) nonzero += got[size_t(i * q_cols + j)] != 0.f;
  CHECK(nonzero == 0);
}


// Key totals (a.key_mass) from query row first_row on, called through attention_cuda: f16 K/V on
// tensor cores (AttentionRoute::mma_key_mass; with the caller's workspace or its own) within the
// derived bounds of tests/attention-mass-f16-bound.h, or the f32 kernel (tensor_cores off) within
// 5e-5 · (1 + total) of the CPU (expect_close). key_mass sits between guards; K/V rows past n_kv
// hold NaN.
void run_key_mass_case(const ragkv::test::ProblemSpec& s, int64_t first_row, uint32_t seed, bool tensor_cores,
                       bool with_work, int key_splits = 0) {
  using namespace ragkv::test;
  INFO("case: " << s.what << ", from row " << first_row << (tensor_cores ? "" : ", f32 kernel")
                << (with_work ? ", caller's workspace" : "") << ", key splits " << key_splits);
  const AttentionProblem p = make_problem(s, seed);
  const int64_t q_cols = int64_t(p.n_head) * p.head_dim;
  const size_t guard = 8;
  DeviceProblem dp(p);
  DeviceBuffer dout(std::vector<float>(size_t(p.n_q * q_cols), 0.f));
  DeviceBuffer dmass(std::vector<float>(size_t(p.n_kv) + 2 * guard, kGuard));
  ragkv::AttentionArgs a = dp.args;
  a.out = dout.as<float>();
  a.key_mass = dmass.as<float>() + guard;
  a.key_mass_first_row = first_row;
  a.tensor_cores = tensor_cores;
  a.key_splits = key_splits;
  CHECK(ragkv::attention_route(a) == (tensor_cores ? ragkv::AttentionRoute::mma_key_mass : ragkv::AttentionRoute::f32_mass));
  const size_t mass_bytes = ragkv::attention_key_mass_work_bytes(a), mma_bytes = ragkv::attention_mma_work_bytes(a);
  DeviceBuffer dwork(std::vector<uint8_t>(with_work ? mass_bytes : 1, 0xff));
  DeviceBuffer dmma(std::vector<uint8_t>(with_work ? std::max<size_t>(mma_bytes, 1) : 1, 0xff));
  if (with_work) {
    a.mass_work = dwork.as<void>();
    a.mass_work_bytes = mass_bytes;
    a.mma_work = dmma.as<void>();
    a.mma_work_bytes = mma_bytes;
  }
  ragkv::attention_cuda(a, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<float> got = unguard(dmass.download<float>(size_t(p.n_kv) + 2 * guard), guard, "key totals");
  const std::vector<float> ref = cpu_key_totals(p, first_row);
  if (tensor_cores) {
    const BoundCheck c = check_against_bound(got, ref, key_totals_f16_bound(p, first_row));
    MESSAGE(s.what << ", from row " << first_row << ": totals worst error / bound " << c.worst_ratio);
    CHECK(c.nonfinite == 0);
    CHECK(c.over == 0);
    const BoundCheck o = check_against_bound(dout.download<float>(size_t(p.n_q * q_cols)), cpu_attention(p),
                                             attention_f16_bound(p));
    CHECK(o.over == 0);
  } else {
    expect_close(got, ref, "key totals");
  }
}

// Segment mass on tensor cores (AttentionRoute::mma_segment_mass), called through attention_cuda
// with or without the caller's workspace, within the derived bounds of
// tests/attention-mass-f16-bound.h for the mass and tests/attention-f16-bound.h for the output.
// The first three queries precede every key (their mass must be exactly 0); seg_mass sits between
// guards.
void run_segment_mass_case(const ragkv::test::ProblemSpec& s, uint32_t seed, bool with_work, int key_splits = 0) {
  using namespace ragkv::test;
  INFO("case: " << s.what << (with_work ? ", caller's workspace" : "") << ", key splits " << key_splits);
  AttentionProblem p = make_problem(s, seed);
  if (p.causal)
    for (int64_t i = 0; i < std::min<int64_t>(3, p.n_q); ++i) p.q_pos[size_t(i)] = -1;
  const std::vector<int64_t> segs = test_segments(p.n_kv, /*tile_edges=*/!with_work);
  const int n_seg = int(segs.size()) - 1;
  const int64_t q_cols = int64_t(p.n_head) * p.head_dim;
  const size_t n_mass = size_t(p.n_q * p.n_head * n_seg), guard = 8;
  DeviceProblem dp(p);
  DeviceBuffer dout(std::vector<float>(size_t(p.n_q * q_cols), 0.f)), dseg(segs);
  DeviceBuffer dmass(std::vector<float>(n_mass + 2 * guard, kGuard));
  ragkv::AttentionArgs a = dp.args;
  a.out = dout.as<float>();
  a.seg_begin = dseg.as<int64_t>();
  a.n_seg = n_seg;
  a.seg_mass = dmass.as<float>() + guard;
  a.key_splits = key_splits;
  CHECK(ragkv::attention_route(a) == ragkv::AttentionRoute::mma_segment_mass);
  const size_t work_bytes = ragkv::attention_segment_mass_work_bytes(a), mma_bytes = ragkv::attention_mma_work_bytes(a);
  DeviceBuffer dwork(std::vector<uint8_t>(with_work ? work_bytes : 1, 0xff));
  DeviceBuffer dmma(std::vector<uint8_t>(with_work ? std::max<size_t>(mma_bytes, 1) : 1, 0xff));
  if (with_work) {
    a.mass_work = dwork.as<void>();
    a.mass_work_bytes = work_bytes;
    a.mma_work = dmma.as<void>();
    a.mma_work_bytes = mma_bytes;
  }
  ragkv::attention_cuda(a, nullptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<float> got = unguard(dmass.download<float>(n_mass + 2 * guard), guard, "segment mass");
  const BoundCheck c = check_against_bound(got, cpu_segment_mass(p, segs), segment_mass_f16_bound(p, segs));
  MESSAGE(s.what << ": segment mass worst error / bound " << c.worst_ratio);
  CHECK(c.nonfinite == 0);
  CHECK(c.over == 0);
  const BoundCheck o =
      check_against_bound(dout.download<float>(size_t(p.n_q * q_cols)), cpu_attention(p), attention_f16_bound(p));
  CHECK(o.over == 0);
}
}  // namespace

// Fields: what, head_dim, n_head, n_kv_head, n_q, n_kv, kv_f16, layout, window, softcap, seg, base.
TEST_CASE("cuda attention: causal prefill with ascending positions") {
  if (gpu_missing()) return;
  const Case cases[] = {
      {"prefill, MHA", 64, 8, 8, 200, 200, true, Layout::prefill},
      {"prefill, GQA 3", 128, 12, 4, 333, 333, false, Layout::prefill},
      {"prefill continued, GQA 4", 32, 4, 1, 77, 1000, true, Layout::prefill},
      {"prefill, GQA 8, head_dim 256", 256, 8, 1, 130, 517, true, Layout::prefill, 0, 0.f, false, 100000},
      {"one query at the end, GQA 4", 128, 32, 8, 1, 2000, true, Layout::prefill},
      {"two queries, odd sizes", 64, 3, 1, 2, 45, false, Layout::prefill},
  };
  run_cases(cases, 1000);
}

TEST_CASE("cuda attention: selective recompute (shuffled key positions, queries at arbitrary rows)") {
  if (gpu_missing()) return;
  const Case cases[] = {
      {"chunks, GQA 4", 128, 8, 2, 150, 1900, true, Layout::chunks},
      {"chunks, GQA 3, f32", 64, 9, 3, 37, 1234, false, Layout::chunks},
      {"chunks, MHA, head_dim 256", 256, 4, 4, 300, 800, true, Layout::chunks},
      {"shuffled, GQA 8", 32, 16, 2, 60, 999, true, Layout::shuffled},
      {"shuffled, head_dim 256, f32", 256, 8, 4, 17, 300, false, Layout::shuffled},
  };
  run_cases(cases, 2000);
}

TEST_CASE("cuda attention: sliding window and softcap") {
  if (gpu_missing()) return;
  const Case cases[] = {
      {"window 256, prefill, GQA 2", 256, 8, 4, 300, 1200, true, Layout::prefill, 256},
      {"window 100, chunks", 128, 8, 8, 64, 700, false, Layout::chunks, 100},
      {"window 37, shuffled, softcap", 64, 12, 4, 90, 500, true, Layout::shuffled, 37, 2.f},
      {"softcap, prefill, GQA 8", 256, 8, 1, 96, 400, false, Layout::prefill, 0, 1.5f},
      {"softcap, chunks", 32, 6, 3, 50, 640, true, Layout::chunks, 0, 3.f},
  };
  run_cases(cases, 3000);
}

TEST_CASE("cuda attention: queries that see no key get 0") {
  if (gpu_missing()) return;
  const Case cases[] = {
      // Keys every 3 positions and a window of 2: a third of the windows are empty.
      {"empty windows", 64, 4, 2, 50, 300, true, Layout::gapped, 2, 0.f, true, 10},
      {"queries before the first key", 32, 6, 2, 40, 90, false, Layout::gapped, 0, 0.f, true, 60},
      {"every key after every query", 64, 2, 2, 5, 64, true, Layout::before, 0, 0.f, true, 1000},
      {"no keys at all", 128, 4, 4, 3, 0, true, Layout::prefill},
      {"no keys, non-causal", 64, 4, 1, 3, 0, false, Layout::encoder},
  };
  run_cases(cases, 4000);
}

TEST_CASE("cuda attention: non-causal encoder") {
  if (gpu_missing()) return;
  const Case cases[] = {
      {"encoder, MiniLM-like", 32, 12, 12, 128, 128, false, Layout::encoder, 0, 0.f, true},
      {"encoder, GQA 4, f16, softcap", 64, 8, 2, 33, 257, true, Layout::encoder, 0, 2.5f},
      {"encoder, head_dim 256", 256, 2, 1, 7, 1000, false, Layout::encoder},
  };
  run_cases(cases, 5000);
}

TEST_CASE("cuda attention: per-segment attention mass") {
  if (gpu_missing()) return;
  const Case cases[] = {
      {"mass, prefill", 64, 8, 8, 120, 500, true, Layout::prefill, 0, 0.f, true},
      {"mass, chunks, GQA 4", 128, 8, 2, 150, 1900, true, Layout::chunks, 0, 0.f, true},
      {"mass, shuffled, window", 32, 4, 4, 70, 777, false, Layout::shuffled, 64, 0.f, true},
      {"mass, head_dim 256, GQA 8, softcap", 256, 8, 1, 20, 333, true, Layout::chunks, 0, 2.f, true},
  };
  run_cases(cases, 6000);
}

// Calls with at most kDecodeMaxVectors query vectors per KV head go to the split-K kernels
// (attention-decode.cu), whatever the number of keys: ranges of 256 keys, the last one partial or
// of one key, or a single range.
TEST_CASE("cuda attention: split-K decode (few query vectors over many keys)") {
  if (gpu_missing()) return;
  const Case cases[] = {
      {"decode, GQA 4, f16", 128, 32, 8, 1, 4000, true, Layout::prefill},
      {"decode, GQA 8, head_dim 256, window", 256, 8, 1, 1, 3000, true, Layout::prefill, 512},
      {"two rows, GQA 4, f32, softcap", 64, 8, 2, 2, 1500, false, Layout::prefill, 0, 2.f},
      {"question rows, chunks, MHA", 32, 4, 4, 8, 1000, true, Layout::chunks},
      {"decode, shuffled keys, window", 64, 4, 4, 1, 777, true, Layout::shuffled, 100},
      {"empty windows", 64, 4, 2, 3, 600, true, Layout::gapped, 2, 0.f, false, 10},
      {"non-causal", 64, 8, 8, 5, 1000, false, Layout::encoder},
      {"every key after the query", 64, 2, 2, 1, 300, true, Layout::before, 0, 0.f, false, 1000},
      {"257 keys: a last range of one key", 128, 8, 2, 1, 257, true, Layout::prefill},
      {"decode of a short prompt: one range", 64, 8, 2, 1, 40, true, Layout::prefill},
      {"one key", 128, 4, 4, 1, 1, true, Layout::prefill},
  };
  run_cases(cases, 7000);
}

// Split-K's ranges combined by the partial kernel's last block of each KV head (the default)
// against the combine kernel (separate_combine): the same output bit for bit, one range and many,
// with the caller's counters (reused: each call must leave them zero) and the launch's own, and
// both with the output quantised into 8-bit blocks (q8_block 32 and 256) — the same blocks too.
TEST_CASE("cuda attention: split-K's combine in the last block equals the combine kernel, bit for bit") {
  if (gpu_missing()) return;
  using ragkv::test::ProblemSpec;
  const ProblemSpec cases[] = {
      {"decode, GQA 4, 16 ranges", 128, 32, 8, 1, 4000},   {"one range", 64, 8, 2, 1, 100},
      {"two rows, GQA 4, window", 64, 8, 2, 2, 1500, false, 300}, {"shuffled keys, MHA", 32, 8, 8, 1, 777, true},
      {"head_dim 256, GQA 4, softcap", 256, 4, 1, 1, 600, false, 0, 2.f},
  };
  DeviceBuffer counters(std::vector<uint32_t>(64, 0u));
  uint32_t seed = 7700;
  for (const ProblemSpec& s : cases) {
    const ragkv::test::AttentionProblem p = make_problem(s, seed++);
    const int64_t q_cols = int64_t(p.n_head) * p.head_dim;
    const size_t n_out = size_t(p.n_q * q_cols);
    DeviceProblem dp(p);
    for (const int block : {0, 32, 256}) {
      CAPTURE(s.what);
      CAPTURE(block);
      // [n_q][q_cols] values, their blocks' scales and sums (as int8-gemv.cu lays them out).
      const auto run = [&](bool separate, bool own_counters) {
        DeviceBuffer out(std::vector<float>(n_out, kGuard)), q(std::vector<int8_t>(n_out, 0));
        DeviceBuffer d(std::vector<float>(n_out / 32, 0.f)), sums(std::vector<float>(n_out / 16, 0.f));
        ragkv::AttentionArgs a = dp.args;
        a.out = out.as<float>();
        a.separate_combine = separate;
        a.decode_done = own_counters ? nullptr : counters.as<uint32_t>();
        if (block) {
          a.q8_block = block;
          a.q8.q = q.as<int8_t>();
          a.q8.d = d.as<float>();
          if (block == 32) a.q8.dsum = sums.as<float>();
          else a.q8.bsum = reinterpret_cast<int16_t*>(sums.as<float>());
        }
        ragkv::attention_cuda(a, nullptr);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        // (the sums as bits: two int16 bsum read as a float may be a NaN, unequal to itself)
        return std::make_tuple(out.download<float>(n_out), q.download<int8_t>(n_out), d.download<float>(n_out / 32),
                               sums.download<uint32_t>(n_out / 16));
      };
      const auto separate = run(true, false);
      CHECK(run(false, false) == separate);
      CHECK(run(false, false) == separate);  // the counters were left zero
      CHECK(run(false, true) == separate);
    }
  }
  CHECK(counters.download<uint32_t>(64) == std::vector<uint32_t>(64, 0u));
}

// The tensor-core kernel: every head_dim, GQA, vectors not a multiple of the block's 64, keys
// not a multiple of the tile, selective-recompute layouts, windows, softcap, non-causal.
TEST_CASE("cuda attention: tensor-core kernel within the derived f16 bound") {
  if (gpu_missing()) return;
  using ragkv::test::ProblemSpec;
  const ProblemSpec cases[] = {
      {"prefill, GQA 4, head_dim 128", 128, 8, 2, 160, 160},
      {"prefill continued, GQA 8, head_dim 64", 64, 8, 1, 61, 700},
      {"recompute rows, shuffled keys, head_dim 128", 128, 4, 4, 90, 900, true},
      {"recompute rows, Gemma 3 shape, softcap", 256, 4, 1, 50, 400, true, 0, 2.f},
      {"sliding window 100, head_dim 32", 32, 6, 3, 120, 600, false, 100},
      {"window 37, shuffled keys, softcap", 64, 12, 4, 70, 333, true, 37, 2.5f},
      {"encoder, non-causal", 64, 4, 4, 40, 300, false, 0, 0.f, false},
      {"one query row, MHA", 128, 2, 2, 1, 100},
  };
  uint32_t seed = 9000;
  for (const ProblemSpec& s : cases) run_mma_case(s, seed++, false, /*key_splits=*/1);  // unsplit, on any GPU
  // Through attention_cuda's routing: f16 K/V without mass go to the tensor-core kernel (a decode
  // step's few vectors to split-K, which the bound holds too).
  run_mma_case({"routed prefill, GQA 4, head_dim 128", 128, 16, 4, 1024, 1024}, seed++, true);
  run_mma_case({"routed recompute rows, GQA 4", 128, 32, 8, 600, 1000, true}, seed++, true);
  run_mma_case({"routed question rows, GQA 4", 128, 8, 2, 12, 700, true}, seed++, true);
}

// Key totals (prophet's question attention per key): on tensor cores for f16 K/V, by the f32
// kernel otherwise; from the first query row or only the question's last rows.
TEST_CASE("cuda attention: key totals on tensor cores within the derived f16 bound, and on the f32 kernel") {
  if (gpu_missing()) return;
  using ragkv::test::ProblemSpec;
  const ProblemSpec cases[] = {
      {"question rows, GQA 4, head_dim 128", 128, 32, 8, 40, 2100},
      {"recompute rows, shuffled keys, head_dim 64", 64, 8, 2, 150, 900, true},
      {"Gemma 3 shape, window 37, softcap", 256, 4, 1, 70, 400, true, 37, 2.f},
      {"encoder, non-causal, head_dim 32", 32, 4, 4, 20, 300, false, 0, 0.f, false},
      {"one question row, MHA", 64, 2, 2, 1, 100},
  };
  uint32_t seed = 9500;
  for (const ProblemSpec& s : cases) {
    const int64_t last = std::max<int64_t>(0, s.n_q - 12);
    run_key_mass_case(s, 0, seed++, true, true, /*key_splits=*/1);
    run_key_mass_case(s, last, seed++, true, false);  // split or not as the GPU decides
    run_key_mass_case(s, last, seed++, false, false);
  }
  // Every row before first_row: the totals are all zero.
  run_key_mass_case({"no counted row", 64, 4, 2, 30, 200}, 30, seed++, true, true);
  // The attention split over key ranges: (m, l) from the combine.
  run_key_mass_case({"question over a long prompt, split 5", 128, 16, 4, 40, 3000}, 28, seed++, true, true, 5);
  run_key_mass_case({"shuffled keys, split 16", 64, 8, 2, 20, 3000, true}, 8, seed++, true, false, 16);
}

// Segment mass (Cache-Craft's attention per chunk) on tensor cores: every head_dim, GQA, vectors
// not a multiple of the block's 64, shuffled keys, windows, softcap, non-causal.
TEST_CASE("cuda attention: segment mass on tensor cores within the derived f16 bound") {
  if (gpu_missing()) return;
  using ragkv::test::ProblemSpec;
  const ProblemSpec cases[] = {
      {"precompute rows, GQA 4, head_dim 128", 128, 32, 8, 300, 300},
      {"recompute rows, shuffled keys, head_dim 64", 64, 8, 2, 150, 900, true},
      {"Gemma 3 shape, window 37, softcap", 256, 4, 1, 70, 400, true, 37, 2.f},
      {"sliding window 100, head_dim 32", 32, 6, 3, 120, 601, false, 100},
      {"encoder, non-causal", 64, 4, 4, 40, 300, false, 0, 0.f, false},
  };
  uint32_t seed = 9700;
  for (const ProblemSpec& s : cases) {
    run_segment_mass_case(s, seed++, true, /*key_splits=*/1);
    run_segment_mass_case(s, seed++, false);  // split or not as the GPU decides
  }
  // The attention split over key ranges: (m, l) from the combine.
  run_segment_mass_case({"recompute rows over a long prompt, split 7", 128, 8, 2, 30, 2500, true}, seed++, true, 7);
}

// The shapes of an 8B layer's attention of n_q rows over n_kv keys (no data: for the split decision).
ragkv::AttentionArgs question_args(int64_t n_q, int64_t n_kv) {
  ragkv::AttentionArgs a;
  a.n_q = n_q;
  a.n_kv = n_kv;
  a.n_head = 32;
  a.n_kv_head = 8;
  a.head_dim = 128;
  return a;
}

// Few query vectors per KV head over many keys: the kernel splits the keys into ranges (forced
// here: 2, 3, 4, 16 and 9 on 2 tiles; and as the shapes decide) and combines their partial sums — within the
// same bound as unsplit, including queries that see no key and ranges a causal block skips whole.
TEST_CASE("cuda attention: tensor-core kernel over key ranges (split keys) within the derived f16 bound") {
  if (gpu_missing()) return;
  using ragkv::test::ProblemSpec;
  uint32_t seed = 9900;
  run_mma_case({"question rows, GQA 4, head_dim 128, split 2", 128, 32, 8, 40, 2100}, seed++, false, 2);
  run_mma_case({"recompute rows, shuffled keys, split 3", 64, 8, 2, 90, 1500, true}, seed++, false, 3);
  run_mma_case({"Gemma 3 shape, window 300, softcap, split 16", 256, 4, 1, 30, 3000, true, 300, 2.f}, seed++, false,
               ragkv::kMaxKeySplits);
  run_mma_case({"encoder, non-causal, split 4", 32, 4, 4, 20, 1000, false, 0, 0.f, false}, seed++, false, 4);
  run_mma_case({"5 rows (2 that see keys), MHA, more splits than tiles", 64, 2, 2, 5, 100}, seed++, false, 9);
  // A causal prefill split in 4: early blocks skip whole later ranges (their partial sums empty).
  run_mma_case({"prefill, split 4", 128, 8, 2, 256, 512}, seed++, false, 4);
  // As attention_cuda decides: a short question over a long prompt is split (the routed prefill
  // of the test above is not).
  int device = 0, sms = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess);
  if (sms > 16) CHECK(ragkv::attention_mma_work_bytes(question_args(24, 6000)) > 0);  // 16 blocks unsplit
  CHECK(ragkv::attention_mma_work_bytes(question_args(4096, 4096)) == 0);
  run_mma_case({"routed question over 6,000 keys", 128, 16, 4, 24, 6000}, seed++, true);
}

TEST_CASE("cuda attention: bad arguments throw ragkv::Error before touching the device") {
  // Runs without a GPU: every check fails before a launch, and no pointer is dereferenced.
  alignas(16) static float buf[64];
  alignas(16) static int32_t pos[4];
  auto valid = [&] {
    ragkv::AttentionArgs a;
    a.q = buf;
    a.q_pos = pos;
    a.k = buf;
    a.v = buf;
    a.k_pos = pos;
    a.n_q = 1;
    a.n_kv = 1;
    a.n_head = 4;
    a.n_kv_head = 2;
    a.head_dim = 64;
    a.scale = 0.125f;
    a.out = buf;
    return a;
  };
  auto a = valid();
  a.head_dim = 48;
  CHECK_THROWS_WITH_AS(ragkv::attention_cuda(a, nullptr), doctest::Contains("head_dim 48"), ragkv::Error);
  a = valid();
  a.n_kv_head = 3;
  CHECK_THROWS_WITH_AS(ragkv::attention_cuda(a, nullptr), doctest::Contains("4 query heads"), ragkv::Error);
  a = valid();
  a.causal = false;
  a.sliding_window = 16;
  CHECK_THROWS_WITH_AS(ragkv::attention_cuda(a, nullptr), doctest::Contains("sliding window"), ragkv::Error);
  a = valid();
  a.k_pos = nullptr;
  CHECK_THROWS_WITH_AS(ragkv::attention_cuda(a, nullptr), doctest::Contains("k_pos"), ragkv::Error);
  a = valid();
  a.q = buf + 1;
  CHECK_THROWS_WITH_AS(ragkv::attention_cuda(a, nullptr), doctest::Contains("aligned"), ragkv::Error);
  a = valid();
  a.seg_mass = buf;
  a.n_seg = 2;
  CHECK_THROWS_WITH_AS(ragkv::attention_cuda(a, nullptr), doctest::Contains("seg_begin"), ragkv::Error);
  a = valid();
  a.n_q = -1;
  CHECK_THROWS_AS(ragkv::attention_cuda(a, nullptr), ragkv::Error);
}

#endif  // RAGKV_HAVE_CUDA
