// The CPU backend: weights kept in their GGUF types and multiplied by block kernels
// (core/backend/cpu-matmul.h, core/backend/quant-kernels.h; F32 weights by OpenBLAS SGEMM), prompt
// attention on key tiles (core/backend/cpu-attention.h) or by SGEMM, a decode step's by f16 row
// kernels, OpenMP-threaded kernels for the rest. It is the numerical reference the CUDA backend
// is checked against.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>

#include "core/backend/cpu-attention.h"
#include "core/backend/cpu-backend.h"
#include "core/backend/cpu-gemm.h"
#include "core/backend/cpu-matmul.h"
#include "core/backend/cpu-weight.h"
#include "core/backend/exp-f32.h"
#include "core/backend/quant-kernels.h"
#include "core/util/error.h"
#include "core/format/fp16.h"
#include "core/format/gguf.h"

namespace ragkv {

namespace {

// GELU's tanh form (Gemma's GeGLU): x/2 · (1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³), computed
// as the equal x · σ(2u) = x / (1 + e^(−2u)) through exp_f32, so the loop vectorises: std::tanh
// per element took 16 % of a Gemma 3 prefill. e^(−2u) is taken at −2u clamped to [−87, 87]
// (beyond it σ is 1 to f32 precision, or x·σ below 1e-36 in magnitude); the clamp works on |−2u|'s
// bits (non-negative floats order like their bits) and puts the sign back, as in exp_f32's callers.
inline float gelu_tanh(float x) {
  constexpr float kMinus2Sqrt2OverPi = -1.5957691216057308f;
  const float t = kMinus2Sqrt2OverPi * (x + 0.044715f * x * x * x);
  const uint32_t sign = std::bit_cast<uint32_t>(t) & 0x80000000u;
  const int32_t mag = std::min(std::bit_cast<int32_t>(std::fabs(t)), std::bit_cast<int32_t>(87.f));
  return x / (1.f + exp_f32(std::bit_cast<float>(uint32_t(mag) | sign)));
}

// gelu(x) = x·Φ(x) = x/2 · (1 + erf(x/√2)), through erfc (Numerical Recipes' erfcc, fractional
// error < 1.2e-7) so the negative tail keeps its relative precision; no libm call, so it
// vectorises (std::erf per element costs as much as the FFN GEMMs of a BERT layer).
inline float gelu_erf_f32(float x) {
  // z = min(|x|/√2, 9): erfc(9) ≈ 4e-37, so a larger z changes nothing but would take exp out of
  // range. Non-negative floats order like their bits, so the clamp is an integer min.
  const float z = std::bit_cast<float>(
      std::min(std::bit_cast<int32_t>(std::fabs(x) * 0.70710678118654752f), std::bit_cast<int32_t>(9.f)));
  const float t = 1.f / (1.f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  const float half_erfc = 0.5f * t * exp_f32(-z * z - 1.26551223f + t * p);  // erfc(|x|/√2) / 2
  // Φ(x) = 1 − erfc/2 for x ≥ 0, erfc/2 below, chosen by the sign bit (a select would not
  // vectorise either).
  const int32_t below = std::bit_cast<int32_t>(x) >> 31;  // all ones when the sign bit is set
  const float phi = std::bit_cast<float>((std::bit_cast<int32_t>(half_erfc) & below) |
                                         (std::bit_cast<int32_t>(1.f - half_erfc) & ~below));
  return x * phi;
}

// Softmax of one row of attention logits where every key is visible (non-causal attention), in
// f32 lanes: vectorised exp_f32 and sum. Causal attention uses it on each query's visible run of
// keys when key positions ascend (every prefill); otherwise it keeps a masked scalar loop.
void softmax_row_all_visible(float* s, int64_t w, float softcap) {
  if (softcap > 0)
    for (int64_t j = 0; j < w; ++j) s[j] = softcap * std::tanh(s[j] / softcap);
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < w; ++j) mx = std::max(mx, s[j]);
  float sum = 0.f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < w; ++j) {
    // exp(−d) with d = mx − s ≥ 0 clamped to 87 (exp_f32's range; e^−87 ≈ 1.6e-38 ≈ 0 beside
    // the max's 1); non-negative floats order like their bits, so the clamp is an integer min.
    const float d =
        std::bit_cast<float>(std::min(std::bit_cast<int32_t>(mx - s[j]), std::bit_cast<int32_t>(87.f)));
    s[j] = exp_f32(-d);
    sum += s[j];
  }
  const float inv = 1.f / sum;  // ≥ 1: the max contributes e^0
#pragma omp simd
  for (int64_t j = 0; j < w; ++j) s[j] *= inv;
}

// Softmax of one row of causal attention logits s[j] for keys at positions kp[j] (any order):
// keys after qp, or outside the sliding window, get probability 0.
void softmax_row_masked(float* s, int64_t w, const int32_t* kp, int32_t qp, const AttentionParams& p) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < w; ++j) {
    const bool visible = kp[j] <= qp && (p.sliding_window <= 0 || kp[j] > qp - p.sliding_window);
    if (!visible) {
      s[j] = -std::numeric_limits<float>::infinity();
      continue;
    }
    if (p.softcap > 0) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (int64_t j = 0; j < w; ++j) {
    s[j] = std::isinf(s[j]) ? 0.f : std::exp(s[j] - mx);
    sum += s[j];
  }
  const float inv = sum > 0 ? float(1.0 / sum) : 0.f;
  for (int64_t j = 0; j < w; ++j) s[j] *= inv;
}

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads) { set_threads(threads); }

  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "cpu"; }
  // The decode table and the prompt table (f32: dequantised tiles into SGEMM), and the
  // RAGKV_PREFILL_KERNELS=quant routing, which changes products without changing either table.
  std::string kernels() const override {
    const PromptKernels* p = prompt_kernels();
    std::string k = std::string(quant_kernels().name) + "+" + (p ? p->name : "f32");
    const char* force = std::getenv("RAGKV_PREFILL_KERNELS");
    if (force && std::strcmp(force, "quant") == 0) k += "+block8";
    return k;
  }
  int threads() const override { return threads_; }
  void set_threads(int n) override {
    threads_ = n > 0 ? n : std::max(1, omp_get_num_procs());
    gemm_set_threads(threads_);
    omp_set_num_threads(threads_);
  }

  void* raw_alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) fail("out of host memory allocating {} bytes", bytes);
    return p;
  }
  void raw_free(void* p) override { std::free(p); }
  void upload(const Tensor& dst, const void* src) override { std::memcpy(dst.data(), src, dst.bytes()); }
  void download(const Tensor& src, void* dst) override { std::memcpy(dst, src.data(), src.bytes()); }
  void fill_zero(const Tensor& t) override { std::memset(t.data(), 0, t.bytes()); }

  // Every op of the interface, with every dtype it defines.
  bool supports(BackendOp op, DType dtype) const override { return backend_op_defined(op, dtype); }

 protected:
  void copy_impl(const Tensor& src, const Tensor& dst) override {
    std::memcpy(dst.data(), src.data(), src.bytes());
  }

  std::unique_ptr<Weight> load_weight_impl(std::span<const GgufTensor* const> parts, WeightMemory mem) override;
  void keep_in_kernel_layout(CpuWeight& w, std::span<const GgufTensor* const> tensors);

  void embed_impl(const Weight& table, std::span<const int32_t> ids, const Tensor& out, float scale) override {
    const CpuWeight& w = cpu_weight(table);
    const CpuWeightPart& part = w.parts[0];
    for (size_t i = 0; i < ids.size(); ++i) {
      float* dst = out.as<float>() + i * out.cols;
      dequantize_row(part.type, part.data + static_cast<int64_t>(ids[i]) * part.row_bytes, dst, w.in_features);
      for (int64_t j = 0; j < w.in_features; ++j) dst[j] *= scale;
    }
  }

  void matmul_impl(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                   std::span<const Weight* const> biases, Activations act) override {
    matmul_.run(x, cpu_weight(w), outs, biases, threads_, act);
  }

  void rms_norm_impl(const Tensor& x, const Weight& w, float eps, const Tensor& y) override {
    const float* wp = cpu_weight(w).values.data();
    const float* xp = x.as<float>();
    float* yp = y.as<float>();
    const int64_t n = x.cols;
#pragma omp parallel for schedule(static) num_threads(threads_) if (wide(x.numel()))
    for (int64_t i = 0; i < x.rows; ++i) {
      double ss = 0;
      for (int64_t j = 0; j < n; ++j) ss += double(xp[i * n + j]) * xp[i * n + j];
      const float inv = 1.f / std::sqrt(float(ss / n) + eps);
      for (int64_t j = 0; j < n; ++j) yp[i * n + j] = xp[i * n + j] * inv * wp[j];
    }
  }

  void rope_impl(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
                 const RopeParams& p, bool inverse) override {
    const int half = p.n_rot / 2;
    const std::vector<float> inv_freq = rope_inv_freq(p);
    const float sign = inverse ? -1.f : 1.f;
    const bool f16 = x.dtype == DType::f16;
#pragma omp parallel for schedule(static) num_threads(threads_) if (wide(x.numel()))
    for (int64_t r = 0; r < x.rows; ++r) {
      std::vector<float> cs(half), sn(half), row(x.cols);
      const float pos = float(positions[r]) * p.freq_scale;
      for (int i = 0; i < half; ++i) {
        const float theta = pos * inv_freq[i];
        cs[i] = std::cos(theta);
        sn[i] = sign * std::sin(theta);
      }
      if (f16) fp16_to_fp32_row(x.as<f16_t>() + r * x.cols, row.data(), x.cols);
      else std::memcpy(row.data(), x.as<float>() + r * x.cols, x.cols * sizeof(float));
      for (int h = 0; h < n_heads; ++h) {
        float* v = row.data() + int64_t(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const int i0 = p.neox ? i : 2 * i, i1 = p.neox ? i + half : 2 * i + 1;
          const float a = v[i0], b = v[i1];
          v[i0] = a * cs[i] - b * sn[i];
          v[i1] = a * sn[i] + b * cs[i];
        }
      }
      if (f16) fp32_to_fp16_row(row.data(), x.as<f16_t>() + r * x.cols, x.cols);
      else std::memcpy(x.as<float>() + r * x.cols, row.data(), x.cols * sizeof(float));
    }
  }

  void layer_norm_impl(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& y) override {
    const float* wp = cpu_weight(w).values.data();
    const float* bp = cpu_weight(b).values.data();
    const float* xp = x.as<float>();
    float* yp = y.as<float>();
    const int64_t n = x.cols;
#pragma omp parallel for schedule(static) num_threads(threads_) if (wide(x.numel()))
    for (int64_t i = 0; i < x.rows; ++i) {
      const float* xi = xp + i * n;
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += xi[j];
      const double mean = sum / n;
      double var = 0;  // two passes: no cancellation for rows with a large mean
      for (int64_t j = 0; j < n; ++j) var += (xi[j] - mean) * (xi[j] - mean);
      const float inv = float(1.0 / std::sqrt(var / n + eps));
      const float m = float(mean);
      float* yi = yp + i * n;
      for (int64_t j = 0; j < n; ++j) yi[j] = (xi[j] - m) * inv * wp[j] + bp[j];
    }
  }

  void gelu_erf_impl(const Tensor& x, const Tensor& y) override {
    const float* xp = x.as<float>();
    float* yp = y.as<float>();
    const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) num_threads(threads_) if (wide(n))
    for (int64_t i = 0; i < n; ++i) yp[i] = gelu_erf_f32(xp[i]);
  }

  void swiglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    glu(gate, up, out, [](float g) { return g / (1.f + std::exp(-g)); });
  }
  void geglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) override {
    // A lambda, not the function's address: glu inlines it and the loop vectorises (through a
    // function pointer each element was a call: 6 % of a Gemma 3 prefill).
    glu(gate, up, out, [](float g) { return gelu_tanh(g); });
  }

  void add_impl(const Tensor& a, const Tensor& b) override {
    float* ap = a.as<float>();
    const float* bp = b.as<float>();
    const int64_t n = a.numel();
#pragma omp parallel for schedule(static) num_threads(threads_) if (wide(n))
    for (int64_t i = 0; i < n; ++i) ap[i] += bp[i];
  }

  void scatter_rows_impl(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows) override {
    for (size_t i = 0; i < rows.size(); ++i) {  // in order: a row named twice keeps the last write
      const float* s = src.as<float>() + i * src.cols;
      if (dst.dtype == DType::f16) fp32_to_fp16_row(s, dst.as<f16_t>() + rows[i] * dst.cols, dst.cols);
      else std::memcpy(dst.as<float>() + rows[i] * dst.cols, s, dst.cols * sizeof(float));
    }
  }

  void gather_rows_impl(const Tensor& src, const Tensor& out, std::span<const int32_t> rows) override {
    for (size_t i = 0; i < rows.size(); ++i)
      std::memcpy(out.as<float>() + i * out.cols, src.as<float>() + rows[i] * src.cols, src.cols * sizeof(float));
  }

  void row_sq_dist_impl(const Tensor& a, const Tensor& b, std::span<const int32_t> rows, const Tensor& out) override {
#pragma omp parallel for schedule(static) num_threads(threads_) if (wide(a.numel()))
    for (int64_t i = 0; i < a.rows; ++i) {
      std::vector<float> brow(static_cast<size_t>(b.cols));
      if (b.dtype == DType::f16) fp16_to_fp32_row(b.as<f16_t>() + rows[i] * b.cols, brow.data(), b.cols);
      else std::memcpy(brow.data(), b.as<float>() + rows[i] * b.cols, b.cols * sizeof(float));
      const float* ar = a.as<float>() + i * a.cols;
      double acc = 0;
      for (int64_t c = 0; c < a.cols; ++c) {
        const double d = double(ar[c]) - double(brow[c]);
        acc += d * d;
      }
      out.as<float>()[i] = float(acc);
    }
  }

  void attention_impl(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k, const Tensor& v,
                      std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                      const Tensor& out, SegmentMass* seg_mass, NextProduct next) override;

 private:
  int threads_ = 1;
  CpuMatmul matmul_;

  // Whether an element-wise or row-wise op over this many values is worth waking the threads
  // (a decode step's few rows are not). Either way every value is computed the same.
  bool wide(int64_t values) const { return threads_ > 1 && values >= (1 << 15); }

  void attention_one_query(const Tensor& q, int32_t q_pos, const Tensor& k, const Tensor& v,
                           std::span<const int32_t> k_pos, const AttentionParams& p, const Tensor& out);

  void attention_all_visible(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_kv,
                             const AttentionParams& p, const Tensor& out, SegmentMass* seg_mass);

  template <typename F>
  void glu(const Tensor& gate, const Tensor& up, const Tensor& out, F act) {
    const float* g = gate.as<float>();
    const float* u = up.as<float>();
    float* o = out.as<float>();
    const int64_t n = gate.numel();
#pragma omp parallel for schedule(static) num_threads(threads_) if (wide(n))
    for (int64_t i = 0; i < n; ++i) o[i] = act(g[i]) * u[i];
  }
};

// Attention per KV head group with SGEMM: S = scale·Q·Kᵀ, mask by position, softmax, O = P·V.
// Queries are processed in blocks so the score matrix stays bounded for long prompts. When the
// key positions ascend with the rows (every prefill, and reused chunks placed in order), each
// block only touches the key range its positions can see: causal prefill does half the work, and
// sliding-window layers only their window. Non-causal attention goes to attention_all_visible.
void CpuBackend::attention_impl(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k,
                                const Tensor& v, std::span<const int32_t> k_pos, int64_t n_kv,
                                const AttentionParams& p, const Tensor& out, SegmentMass* seg_mass,
                                NextProduct /*next: a hint the CPU does not use*/) {
  if (seg_mass && seg_mass->key_totals) {
    // Every row's attention exactly as without mass (prophet's first pass asks a layer's own
    // attention for the totals). The totals of rows [first_query, n_q) by the reference: one
    // segment per key row over those rows (their output, computed again, dropped: the price of
    // the first computation's bits), then the sum over query rows and heads in double.
    attention_impl(q, q_pos, k, v, k_pos, n_kv, p, out, nullptr, {});
    const int64_t first = seg_mass->first_query, n_mass = q.rows - first;
    std::vector<double> total(size_t(n_kv), 0.0);
    if (n_mass > 0) {
      SegmentMass unit;
      std::vector<float> per_key;
      unit.seg_begin.resize(size_t(n_kv) + 1);
      std::iota(unit.seg_begin.begin(), unit.seg_begin.end(), int64_t(0));
      unit.out = &per_key;
      const Tensor scratch = alloc(DType::f32, n_mass, out.cols);
      attention_impl(q.slice_rows(first, n_mass), p.causal ? q_pos.subspan(size_t(first)) : q_pos, k, v, k_pos, n_kv,
                     p, scratch, &unit, {});
      for (int64_t qh = 0; qh < n_mass * p.n_head; ++qh)
        for (int64_t j = 0; j < n_kv; ++j) total[size_t(j)] += per_key[size_t(qh * n_kv + j)];
    }
    seg_mass->out->assign(total.begin(), total.end());
    return;
  }
  const int hd = p.head_dim;
  const int64_t n_q = q.rows;
  const int64_t q_cols = int64_t(p.n_head) * hd, kv_cols = int64_t(p.n_kv_head) * hd;
  if (!p.causal) {
    attention_all_visible(q, k, v, n_kv, p, out, seg_mass);
    return;
  }
  if (n_q == 1 && k.dtype == DType::f16 && !seg_mass) {  // a decode step
    attention_one_query(q, q_pos[0], k, v, k_pos.first(static_cast<size_t>(n_kv)), p, out);
    return;
  }
  const auto kp_all = k_pos.first(static_cast<size_t>(n_kv));
  const bool ascending = std::is_sorted(kp_all.begin(), kp_all.end());
  // Every prefill and selective recompute (keys ascend, no mass wanted) on tiles with an online
  // softmax where that was measured faster than SGEMM (bench/results, 2026-11-26): heads of up
  // to 128 values, and sliding-window layers of any width (tiles convert only the window).
  if (ascending && !seg_mass && (p.head_dim <= 128 || p.sliding_window > 0)) {
    attention_tiled(quant_kernels(), q, q_pos, k, v, k_pos, n_kv, p, out, threads_);
    return;
  }
  // Keys out of order, the attention mass per segment wanted, or wide heads over a whole prompt:
  // scores of a block of queries against its visible keys by SGEMM, one softmax per row, values
  // by SGEMM.
  const int group = p.n_head / p.n_kv_head;
  const int64_t n_seg = seg_mass ? int64_t(seg_mass->seg_begin.size()) - 1 : 0;
  if (seg_mass) seg_mass->out->assign(static_cast<size_t>(n_q * p.n_head * n_seg), 0.f);

  constexpr int64_t kBlock = 256;
  struct Range { int64_t lo, hi; };
  std::vector<Range> ranges;  // visible key rows per query block
  for (int64_t q0 = 0; q0 < n_q; q0 += kBlock) {
    Range r{0, n_kv};
    if (ascending) {
      const auto blk = q_pos.subspan(q0, std::min(kBlock, n_q - q0));
      const int32_t qmax = *std::max_element(blk.begin(), blk.end());
      const int32_t qmin = *std::min_element(blk.begin(), blk.end());
      r.hi = std::upper_bound(kp_all.begin(), kp_all.end(), qmax) - kp_all.begin();
      if (p.sliding_window > 0)
        r.lo = std::upper_bound(kp_all.begin(), kp_all.end(), qmin - p.sliding_window) - kp_all.begin();
      r.lo = std::min(r.lo, r.hi);
    }
    ranges.push_back(r);
  }

  std::vector<float> kf(static_cast<size_t>(n_kv * hd)), vf(static_cast<size_t>(n_kv * hd));
  std::vector<float> scores(static_cast<size_t>(std::min(n_q, kBlock) * std::max<int64_t>(n_kv, 1)));
  for (int g = 0; g < p.n_kv_head; ++g) {
    // This KV head's keys and values as contiguous f32 [n_kv][hd].
    auto to_f32 = [&](const Tensor& src, std::vector<float>& dst) {
#pragma omp parallel for schedule(static) num_threads(threads_)
      for (int64_t j = 0; j < n_kv; ++j) {
        if (src.dtype == DType::f16) fp16_to_fp32_row(src.as<f16_t>() + j * kv_cols + g * hd, &dst[j * hd], hd);
        else std::memcpy(&dst[j * hd], src.as<float>() + j * kv_cols + g * hd, hd * sizeof(float));
      }
    };
    to_f32(k, kf);
    to_f32(v, vf);
    for (int hg = 0; hg < group; ++hg) {
      const int h = g * group + hg;
      for (int64_t q0 = 0, b = 0; q0 < n_q; q0 += kBlock, ++b) {
        const int64_t nb = std::min(kBlock, n_q - q0);
        const int64_t lo = ranges[b].lo, hi = ranges[b].hi;  // (not a structured binding:
        // clang before 16 cannot capture one in the OpenMP region below, and the fuzz build is clang)
        const int64_t w = hi - lo;
        float* o = out.as<float>() + q0 * q_cols + int64_t(h) * hd;
        if (w == 0) {  // nothing visible (cannot happen for a query that sees itself)
          for (int64_t i = 0; i < nb; ++i) std::fill(o + i * q_cols, o + i * q_cols + hd, 0.f);
          continue;
        }
        gemm_nt(nb, w, hd, q.as<float>() + q0 * q_cols + int64_t(h) * hd, q_cols, kf.data() + lo * hd, hd,
                scores.data(), w, p.scale);
#pragma omp parallel for schedule(static) num_threads(threads_)
        for (int64_t i = 0; i < nb; ++i) {
          float* s = scores.data() + i * w;
          const int32_t qp = q_pos[q0 + i];
          if (ascending) {
            // Keys ascend, so this query's visible keys are one run [a, b) of the block's range:
            // zero the rest, vectorised softmax over the run.
            const int32_t* kb = kp_all.data() + lo;
            const int64_t b_end = std::upper_bound(kb, kb + w, qp) - kb;
            const int64_t a_begin =
                p.sliding_window > 0 ? std::upper_bound(kb, kb + b_end, qp - p.sliding_window) - kb : 0;
            std::fill(s, s + a_begin, 0.f);
            std::fill(s + b_end, s + w, 0.f);
            if (b_end > a_begin) softmax_row_all_visible(s + a_begin, b_end - a_begin, p.softcap);
          } else {
            softmax_row_masked(s, w, kp_all.data() + lo, qp, p);
          }
          if (seg_mass) {
            float* m = seg_mass->out->data() + ((q0 + i) * p.n_head + h) * n_seg;
            for (int64_t sg = 0; sg < n_seg; ++sg) {
              const int64_t sb = std::max<int64_t>(lo, seg_mass->seg_begin[sg]);
              const int64_t se = std::min<int64_t>(hi, seg_mass->seg_begin[sg + 1]);
              float acc = 0.f;
              for (int64_t j = sb; j < se; ++j) acc += s[j - lo];
              m[sg] = acc;
            }
          }
        }
        gemm_nn(nb, hd, w, scores.data(), w, vf.data() + lo * hd, hd, o, q_cols);
      }
    }
  }
}


// One query row (a decode step) against f16 K/V: per head, scores by f16 row dot products, the
// softmax over the visible keys, the values accumulated in place; no f32 copy of the cache. The
// heads that share a KV head are taken together, so each K/V row is converted once for all of
// them; when the cache is long enough to pay for threads and there are fewer KV heads than
// threads, a group is split into equal parts (Gemma 3 270M: one KV head, four query heads).
// A head's values do not depend on the split (quant-kernels.h).
void CpuBackend::attention_one_query(const Tensor& q, int32_t qp, const Tensor& k, const Tensor& v,
                                     std::span<const int32_t> kp, const AttentionParams& p, const Tensor& out) {
  const QuantKernels& qk = quant_kernels();
  const int hd = p.head_dim, group = p.n_head / p.n_kv_head;
  const int64_t kv_cols = int64_t(p.n_kv_head) * hd;
  // Keys in ascending positions (every prefill, and chunks reused in order): the visible ones are
  // one run [lo, hi); otherwise all of them, masked by position.
  const bool ascending = std::is_sorted(kp.begin(), kp.end());
  int64_t lo = 0, hi = int64_t(kp.size());
  if (ascending) {
    hi = std::upper_bound(kp.begin(), kp.end(), qp) - kp.begin();
    if (p.sliding_window > 0) lo = std::upper_bound(kp.begin(), kp.begin() + hi, qp - p.sliding_window) - kp.begin();
  }
  const int64_t w = hi - lo;
  const bool parallel = wide(w * hd * p.n_head);
  // Parts per group: the fewest that give every thread an equal number of tasks.
  int splits = 1;
  if (parallel)
    while (splits < group && (int64_t(p.n_kv_head) * splits < threads_ || (p.n_kv_head * splits) % threads_ != 0))
      ++splits;
  const int per = (group + splits - 1) / splits;
#pragma omp parallel for schedule(static) num_threads(threads_) if (parallel)
  for (int t = 0; t < p.n_kv_head * splits; ++t) {
    const int g = t / splits, h0 = g * group + (t % splits) * per, h1 = std::min(h0 + per, (g + 1) * group);
    if (h0 >= h1) continue;
    const int nq = h1 - h0;
    float* o = out.as<float>() + int64_t(h0) * hd;
    std::fill(o, o + int64_t(nq) * hd, 0.f);
    if (w <= 0) continue;
    const int64_t col = int64_t(g) * hd;
    std::vector<float> s(static_cast<size_t>(nq * w));
    qk.dot_f16_rows(q.as<float>() + int64_t(h0) * hd, nq, k.as<f16_t>() + lo * kv_cols + col, size_t(kv_cols), w, hd,
                    p.scale, s.data());
    for (int h = 0; h < nq; ++h) {
      float* sh = s.data() + h * w;
      if (ascending) softmax_row_all_visible(sh, w, p.softcap);
      else softmax_row_masked(sh, w, kp.data() + lo, qp, p);
    }
    qk.axpy_f16_rows(s.data(), nq, v.as<f16_t>() + lo * kv_cols + col, size_t(kv_cols), w, hd, o);
  }
}

std::unique_ptr<Weight> CpuBackend::load_weight_impl(std::span<const GgufTensor* const> parts, WeightMemory mem) {
  auto w = std::make_unique<CpuWeight>();
  size_t owned_bytes = 0;
  int64_t first = 0;
  for (const GgufTensor* t : parts) {
    CpuWeightPart part;
    part.type = t->type;
    part.rows = t->rows();
    part.row_bytes = ggml_row_bytes(t->type, t->ne[0]);
    part.first_row = first;
    first += part.rows;
    // In place: the file's bytes (an F32 part only where floats may be read, 4-byte aligned).
    const bool aligned = t->type != GgmlType::F32 || reinterpret_cast<uintptr_t>(t->data) % alignof(float) == 0;
    if (mem != WeightMemory::copy && aligned) {
      part.data = t->data;
    } else {
      owned_bytes = (owned_bytes + 63) / 64 * 64;
      part.data = reinterpret_cast<const uint8_t*>(owned_bytes);  // an offset into owned, fixed below
      owned_bytes += part.row_bytes * size_t(part.rows);
    }
    w->parts.push_back(part);
  }
  if (owned_bytes > 0) {
    w->owned.resize(owned_bytes);
    for (size_t i = 0; i < parts.size(); ++i) {
      CpuWeightPart& part = w->parts[i];
      if (part.data == parts[i]->data) continue;
      const size_t offset = reinterpret_cast<uintptr_t>(part.data);
      std::memcpy(w->owned.data() + offset, parts[i]->data, part.row_bytes * size_t(part.rows));
      part.data = w->owned.data() + offset;
    }
  }
  if (parts.size() == 1 && w->parts[0].rows == 1) {  // a vector: f32 for the row ops
    w->values.resize(static_cast<size_t>(parts[0]->ne[0]));
    dequantize_row(w->parts[0].type, w->parts[0].data, w->values.data(), parts[0]->ne[0]);
  } else if (mem == WeightMemory::kernel_layout) {
    keep_in_kernel_layout(*w, parts);
  }
  return w;
}

// WeightMemory::kernel_layout where the CPU has the AVX-512 VNNI kernels and the prompt kernels are
// on: Q4_K parts into the Q4KRows16 layout (cpu-matmul.cpp reads rows16 in both), other quantised
// parts copied as they are, all into one PageMemory (huge pages: a decode step streams it with
// fewer TLB misses, 3 % more tokens/s measured), then the file's pages of those parts released
// where they lie in a mapping of the file, so the resident size stays about the file's: the
// products never read them again (a stray read would fault them in from the file). Decode on the
// 8B-shaped Q4_K_M model: bench/results, "An 8B-shaped model on the CPU".
void CpuBackend::keep_in_kernel_layout(CpuWeight& w, std::span<const GgufTensor* const> tensors) {
  const int64_t k = tensors[0]->ne[0];
  const Q4KRows16* packer = q4_k_rows16();
  if (!packer || !prompt_kernels()) return;
  // Q4_K parts in the Q4KRows16 layout, other quantised ones as they are, each at a multiple of 64 bytes.
  auto kept_bytes = [&](const CpuWeightPart& part) -> size_t {
    if (part.type == GgmlType::Q4_K) return packer->bytes(part.rows, k);
    return part.type == GgmlType::F32 ? 0 : part.row_bytes * size_t(part.rows);
  };
  size_t bytes = 0;
  for (const CpuWeightPart& part : w.parts) bytes = (bytes + 63) / 64 * 64 + kept_bytes(part);
  if (bytes == 0) return;
  w.kernel_layout = PageMemory(bytes);
  size_t offset = 0;
  const size_t group = packer->group_bytes(k);
  for (size_t p = 0; p < w.parts.size(); ++p) {
    CpuWeightPart& part = w.parts[p];
    const size_t n = kept_bytes(part);
    if (n == 0) continue;
    offset = (offset + 63) / 64 * 64;
    uint8_t* out = w.kernel_layout.data() + offset;
    const uint8_t* file = part.data;
    if (part.type == GgmlType::Q4_K) {
      const int64_t groups = (part.rows + 15) / 16;
#pragma omp parallel for schedule(static) num_threads(threads_)
      for (int64_t g = 0; g < groups; ++g)
        packer->repack(file + g * 16 * part.row_bytes, part.row_bytes, std::min<int64_t>(16, part.rows - 16 * g), k,
                       out + size_t(g) * group);
      part.rows16 = out;
    } else {
      std::memcpy(out, file, n);
      part.data = out;
    }
    if (tensors[p]->file_mapped && file == tensors[p]->data)
      release_file_pages(file, part.row_bytes * size_t(part.rows));
    offset += n;
  }
}

// Non-causal attention (encoders): every query sees keys [0, n_kv). An encoder attends per
// sentence, so this is many small products: heads run in parallel, each with single-threaded
// GEMMs (OpenBLAS runs serially inside a parallel region), and the softmax is vectorised.
void CpuBackend::attention_all_visible(const Tensor& q, const Tensor& k, const Tensor& v, int64_t n_kv,
                                       const AttentionParams& p, const Tensor& out, SegmentMass* seg_mass) {
  const int hd = p.head_dim;
  const int64_t n_q = q.rows;
  const int64_t q_cols = int64_t(p.n_head) * hd, kv_cols = int64_t(p.n_kv_head) * hd;
  const int group = p.n_head / p.n_kv_head;
  const int64_t n_seg = seg_mass ? int64_t(seg_mass->seg_begin.size()) - 1 : 0;
  if (seg_mass) seg_mass->out->assign(static_cast<size_t>(n_q * p.n_head * n_seg), 0.f);
  constexpr int64_t kBlock = 256;
  if (n_kv == 0) {  // no keys: nothing to attend to
    fill_zero(out);
    return;
  }
#pragma omp parallel num_threads(threads_)
  {
    std::vector<float> kf(static_cast<size_t>(n_kv * hd)), vf(static_cast<size_t>(n_kv * hd));  // f32 [n_kv][hd]
    std::vector<float> scores(static_cast<size_t>(std::min(n_q, kBlock) * n_kv));  // f32 [block][n_kv]
    int g_loaded = -1;
#pragma omp for schedule(static)
    for (int h = 0; h < p.n_head; ++h) {
      const int g = h / group;
      if (g != g_loaded) {  // this KV head's keys and values as contiguous f32
        auto to_f32 = [&](const Tensor& src, std::vector<float>& dst) {
          for (int64_t j = 0; j < n_kv; ++j) {
            if (src.dtype == DType::f16) fp16_to_fp32_row(src.as<f16_t>() + j * kv_cols + g * hd, &dst[j * hd], hd);
            else std::memcpy(&dst[j * hd], src.as<float>() + j * kv_cols + g * hd, hd * sizeof(float));
          }
        };
        to_f32(k, kf);
        to_f32(v, vf);
        g_loaded = g;
      }
      for (int64_t q0 = 0; q0 < n_q; q0 += kBlock) {
        const int64_t nb = std::min(kBlock, n_q - q0);
        gemm_nt(nb, n_kv, hd, q.as<float>() + q0 * q_cols + int64_t(h) * hd, q_cols, kf.data(), hd,
                scores.data(), n_kv, p.scale);
        for (int64_t i = 0; i < nb; ++i) {
          float* s = scores.data() + i * n_kv;
          softmax_row_all_visible(s, n_kv, p.softcap);
          if (seg_mass) {
            float* m = seg_mass->out->data() + ((q0 + i) * p.n_head + h) * n_seg;
            for (int64_t sg = 0; sg < n_seg; ++sg) {
              const int64_t sb = std::max<int64_t>(0, seg_mass->seg_begin[sg]);
              const int64_t se = std::min<int64_t>(n_kv, seg_mass->seg_begin[sg + 1]);
              float acc = 0.f;
              for (int64_t j = sb; j < se; ++j) acc += s[j];
              m[sg] = acc;
            }
          }
        }
        gemm_nn(nb, hd, n_kv, scores.data(), n_kv, vf.data(), hd, out.as<float>() + q0 * q_cols + int64_t(h) * hd,
                q_cols);
      }
    }
  }
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) { return std::make_unique<CpuBackend>(threads); }

}  // namespace ragkv
