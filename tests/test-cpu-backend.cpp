// CPU backend ops against plain scalar references written from the formulas, over a table of
// shapes with odd sizes. The CPU backend is the reference for the CUDA backend, so it is itself
// checked here op by op.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/util/error.h"
#include "core/format/fp16.h"
#include "core/format/gguf.h"
#include "tests/test-ops-util.h"

using namespace ragkv;

using namespace ragkv::test;

namespace {

// An F32 matrix [out][cols] over v's values, as a GGUF file's tensor (v outlives it).
GgufTensor f32_matrix_tensor(const char* name, const std::vector<float>& v, int64_t out, int64_t cols) {
  GgufTensor t;
  t.name = name;
  t.type = GgmlType::F32;
  t.ne = {cols, out};
  t.nbytes = v.size() * 4;
  t.data = reinterpret_cast<const uint8_t*>(v.data());
  return t;
}

// One query head's attention in double over the f16 keys and values of the KV head at column
// col (rows kc apart): writes the output row to out and returns the softmax probabilities (0 for
// keys the query cannot see: later positions, or outside the window).
std::vector<double> naive_head(const float* qh, const std::vector<f16_t>& kh, const std::vector<f16_t>& vh, int kc,
                               int col, int hd, const std::vector<int32_t>& kpos, int32_t qpos, int window, float scale,
                               float* out) {
  const size_t n_kv = kpos.size();
  std::vector<double> s(n_kv, -INFINITY);
  double mx = -INFINITY;
  for (size_t j = 0; j < n_kv; ++j) {
    if (kpos[j] > qpos || (window > 0 && kpos[j] <= qpos - window)) continue;
    double d = 0;
    for (int t = 0; t < hd; ++t) d += double(qh[t]) * fp16_to_fp32(kh[j * kc + col + t]);
    s[j] = d * scale;
    mx = std::max(mx, s[j]);
  }
  double sum = 0;
  for (double& e : s) sum += (e = std::isinf(e) ? 0 : std::exp(e - mx));
  for (double& e : s) e /= sum;
  for (int t = 0; t < hd; ++t) {
    double o = 0;
    for (size_t j = 0; j < n_kv; ++j) o += s[j] * fp16_to_fp32(vh[j * kc + col + t]);
    out[t] = float(o);
  }
  return s;
}

}  // namespace

TEST_CASE("cpu backend: matmul with bias equals the naive product") {
  auto b = make_cpu_backend(2);
  for (auto [n, in, out] : {std::tuple{1, 64, 7}, {7, 33, 65}, {33, 576, 192}}) {
    auto x = random_vec(size_t(n * in), 1), w = random_vec(size_t(out * in), 2), bias = random_vec(size_t(out), 3);
    auto W = weight_from(*b, w, out, in);
    auto B = weight_from(*b, bias, 1, out);
    Tensor X = upload(*b, x, n, in), Y = b->alloc(DType::f32, n, out);
    b->matmul(X, *W, Y, B.get());
    std::vector<float> ref(size_t(n * out));
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < out; ++j) {
        double s = bias[j];
        for (int p = 0; p < in; ++p) s += double(x[i * in + p]) * w[j * in + p];
        ref[i * out + j] = float(s);
      }
    CHECK(max_rel_err(download(*b, Y), ref) < 1e-4);
  }
}

TEST_CASE("cpu backend: rms_norm, glu and add equal their formulas") {
  auto b = make_cpu_backend(2);
  const int rows = 7, cols = 577;
  auto x = random_vec(rows * cols, 4), w = random_vec(cols, 5);
  auto W = weight_from(*b, w, 1, cols);
  Tensor X = upload(*b, x, rows, cols), Y = b->alloc(DType::f32, rows, cols);
  b->rms_norm(X, *W, 1e-6f, Y);
  std::vector<float> ref(x.size());
  for (int i = 0; i < rows; ++i) {
    double ss = 0;
    for (int j = 0; j < cols; ++j) ss += double(x[i * cols + j]) * x[i * cols + j];
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-6);
    for (int j = 0; j < cols; ++j) ref[i * cols + j] = float(x[i * cols + j] * inv * w[j]);
  }
  CHECK(max_rel_err(download(*b, Y), ref) < 1e-5);

  auto g = random_vec(rows * cols, 6, 3.f), u = random_vec(rows * cols, 7);
  Tensor G = upload(*b, g, rows, cols), U = upload(*b, u, rows, cols), O = b->alloc(DType::f32, rows, cols);
  b->swiglu(G, U, O);
  for (size_t i = 0; i < g.size(); ++i) ref[i] = float(g[i] / (1.0 + std::exp(-double(g[i]))) * u[i]);
  CHECK(max_rel_err(download(*b, O), ref) < 1e-5);
  b->geglu(G, U, O);
  for (size_t i = 0; i < g.size(); ++i) {
    const double v = g[i];
    ref[i] = float(0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))) * u[i]);
  }
  CHECK(max_rel_err(download(*b, O), ref) < 1e-5);
  {  // GeGLU's GELU element by element over its whole range: relative to the value where it is
     // not tiny, absolute below (the negative tail underflows towards 0).
    std::vector<float> xs;
    for (float v = -60.f; v <= 60.f; v += 0.0371f) xs.push_back(v);
    for (float v : {0.f, -0.f, 1e-30f, -1e-30f, 1e-8f, -3.f, 3.f}) xs.push_back(v);
    const int64_t n = int64_t(xs.size());
    Tensor XG = upload(*b, xs, 1, n), ONE = upload(*b, std::vector<float>(xs.size(), 1.f), 1, n);
    Tensor XO = b->alloc(DType::f32, 1, n);
    b->geglu(XG, ONE, XO);
    const std::vector<float> got = download(*b, XO);
    for (int64_t i = 0; i < n; ++i) {
      // x/2 · (1 + tanh u) = x / (1 + e^(−2u)) in double (the first form loses the negative tail
      // to cancellation). 2u takes up to five f32 roundings (x·x, ·x, ·0.044715, +x, ·k: no FMA
      // contraction at -O1, as in the sanitizer build), each ≤ 6e-8 relative and none cancelling;
      // its error moves e^(−2u) by |2u| times as much.
      const double v = xs[size_t(i)], u2 = 2 * std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
      const double want = v / (1 + std::exp(-u2));
      CAPTURE(v);
      CHECK(std::fabs(got[size_t(i)] - want) <= (4 + 5 * std::fabs(u2)) * 6e-8 * std::fabs(want) + 1e-36);
    }
  }
  b->add(G, U);
  for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] + u[i];
  CHECK(max_rel_err(download(*b, G), ref) < 1e-6);

  // add_rms_norm: add, then rms_norm of the sum, exactly; in place too; y may not overlap x or xn.
  Tensor A = upload(*b, x, rows, cols), AN = b->alloc(DType::f32, rows, cols);
  b->add_rms_norm(A, U, *W, 1e-6f, AN);
  Tensor S = upload(*b, x, rows, cols), SN = b->alloc(DType::f32, rows, cols);
  b->add(S, U);
  b->rms_norm(S, *W, 1e-6f, SN);
  CHECK(download(*b, A) == download(*b, S));
  CHECK(download(*b, AN) == download(*b, SN));
  Tensor I = upload(*b, x, rows, cols);
  b->add_rms_norm(I, U, *W, 1e-6f, I);
  CHECK(download(*b, I) == download(*b, SN));
  Tensor B2 = upload(*b, random_vec(2 * rows * cols, 9), 2 * rows, cols);
  CHECK_THROWS_AS(b->add_rms_norm(B2.slice_rows(0, rows), B2.slice_rows(1, rows), *W, 1e-6f, AN), ragkv::Error);
  CHECK_THROWS_AS(b->add_rms_norm(A, B2.slice_rows(0, rows), *W, 1e-6f, B2.slice_rows(1, rows)), ragkv::Error);
  CHECK_THROWS_AS(b->add_rms_norm(A, U.slice_rows(0, rows - 1), *W, 1e-6f, AN), ragkv::Error);
  // The next product named (a hint the CPU backend does not use): the same results; a weight that
  // does not take xn's rows is refused.
  auto next_values = random_vec(3 * cols, 10), wrong_values = random_vec(cols + 1, 11);
  const auto next = weight_from(*b, next_values, 3, cols), wrong = weight_from(*b, wrong_values, 1, cols + 1);
  Tensor H = upload(*b, x, rows, cols), HN = b->alloc(DType::f32, rows, cols);
  b->add_rms_norm(H, U, *W, 1e-6f, HN, {next.get(), ragkv::Activations::block8});
  CHECK(download(*b, H) == download(*b, S));
  CHECK(download(*b, HN) == download(*b, SN));
  CHECK_THROWS_AS(b->add_rms_norm(H, U, *W, 1e-6f, HN, {wrong.get(), ragkv::Activations::block8}), ragkv::Error);
}

TEST_CASE("cpu backend: glu_ffn is matmul_parts, swiglu or geglu, then matmul, exactly, and checks its weights") {
  auto b = make_cpu_backend(2);
  const int rows = 5, in = 64, ff = 96;
  auto g = random_vec(ff * in, 21), u = random_vec(ff * in, 22), d = random_vec(in * ff, 23);
  const GgufTensor tg = f32_matrix_tensor("blk.0.ffn_gate.weight", g, ff, in);
  const GgufTensor tu = f32_matrix_tensor("blk.0.ffn_up.weight", u, ff, in);
  const GgufTensor* parts[] = {&tg, &tu};
  auto gate_up = b->load_weight_stack(parts, "blk.0.ffn_gate_up");
  auto down = weight_from(*b, d, in, ff);
  auto x = random_vec(rows * in, 24);
  Tensor X = upload(*b, x, rows, in);
  for (bool gelu : {false, true}) {
    CAPTURE(gelu);
    Tensor G = b->alloc(DType::f32, rows, ff), U = b->alloc(DType::f32, rows, ff), P = b->alloc(DType::f32, rows, in);
    b->glu_ffn(X, *gate_up, *down, G, U, P, gelu);
    Tensor G2 = b->alloc(DType::f32, rows, ff), U2 = b->alloc(DType::f32, rows, ff), P2 = b->alloc(DType::f32, rows, in);
    const Tensor gu[2] = {G2, U2};
    b->matmul_parts(X, *gate_up, gu);
    if (gelu) b->geglu(G2, U2, G2);
    else b->swiglu(G2, U2, G2);
    b->matmul(G2, *down, P2);
    CHECK(download(*b, P) == download(*b, P2));
    // A weight that is not a gate/up stack, and outputs overlapping the input, are refused.
    CHECK_THROWS_AS(b->glu_ffn(X, *down, *down, G, U, P, gelu), ragkv::Error);
    CHECK_THROWS_AS(b->glu_ffn(X, *gate_up, *down, G, G, P, gelu), ragkv::Error);
  }
}

TEST_CASE("cpu backend: rope_qk is rope on q then on k, and checks both") {
  auto b = make_cpu_backend(2);
  const int n = 6, heads = 4, kv_heads = 2, hd = 32;
  const std::vector<int32_t> pos = {0, 3, 9, 100, 2047, 5};
  RopeParams p;
  p.n_rot = hd;
  p.freq_base = 10000.f;
  const auto qv = random_vec(n * heads * hd, 21), kv = random_vec(n * kv_heads * hd, 22);
  Tensor Q = upload(*b, qv, n, heads * hd), K = upload(*b, kv, n, kv_heads * hd);
  Tensor Q2 = upload(*b, qv, n, heads * hd), K2 = upload(*b, kv, n, kv_heads * hd);
  b->rope_qk(Q, K, pos, heads, kv_heads, hd, p);
  b->rope(Q2, pos, heads, hd, p, false);
  b->rope(K2, pos, kv_heads, hd, p, false);
  CHECK(download(*b, Q) == download(*b, Q2));
  CHECK(download(*b, K) == download(*b, K2));
  CHECK_THROWS_AS(b->rope_qk(Q, K, std::span(pos).first(5), heads, kv_heads, hd, p), ragkv::Error);
  CHECK_THROWS_AS(b->rope_qk(Q, K, pos, heads, heads, hd, p), ragkv::Error);  // K has 2 heads
  CHECK_THROWS_AS(b->rope_qk(Q, Q.reshape(n * 2, heads * hd / 2).slice_rows(0, n), pos, heads, 2, hd, p), ragkv::Error);
}

TEST_CASE("cpu backend: rope_qk_scatter_kv is rope_qk then scatter_kv_rows, and checks both") {
  auto b = make_cpu_backend(2);
  const int n = 3, heads = 4, kv_heads = 2, hd = 32;
  const std::vector<int32_t> pos = {7, 8, 9}, rows = {7, 8, 9};
  RopeParams p;
  p.n_rot = hd;
  const auto qv = random_vec(n * heads * hd, 31), kv = random_vec(n * kv_heads * hd, 32), vv = random_vec(n * kv_heads * hd, 33);
  for (const DType cache : {DType::f16, DType::f32}) {
    CAPTURE(int(cache));
    Tensor Q = upload(*b, qv, n, heads * hd), K = upload(*b, kv, n, kv_heads * hd), V = upload(*b, vv, n, kv_heads * hd);
    Tensor Q2 = upload(*b, qv, n, heads * hd), K2 = upload(*b, kv, n, kv_heads * hd), V2 = upload(*b, vv, n, kv_heads * hd);
    const Tensor kc = b->alloc(cache, 16, kv_heads * hd), vc = b->alloc(cache, 16, kv_heads * hd);
    const Tensor kc2 = b->alloc(cache, 16, kv_heads * hd), vc2 = b->alloc(cache, 16, kv_heads * hd);
    for (const Tensor& t : {kc, vc, kc2, vc2}) b->fill_zero(t);
    b->rope_qk_scatter_kv(Q, K, V, pos, heads, kv_heads, hd, p, kc, vc, rows);
    b->rope_qk(Q2, K2, pos, heads, kv_heads, hd, p);
    b->scatter_kv_rows(K2, V2, kc2, vc2, rows);
    CHECK(download(*b, Q) == download(*b, Q2));
    CHECK(download(*b, K) == download(*b, K2));
    const auto bytes = [&](const Tensor& t) {
      std::vector<uint8_t> h(t.bytes());
      b->download(t, h.data());
      return h;
    };
    CHECK(bytes(kc) == bytes(kc2));
    CHECK(bytes(vc) == bytes(vc2));
    // Each op's conditions, and q kept off the destinations.
    CHECK_THROWS_AS(b->rope_qk_scatter_kv(Q, K, V, std::span(pos).first(2), heads, kv_heads, hd, p, kc, vc, rows),
                    ragkv::Error);
    CHECK_THROWS_AS(b->rope_qk_scatter_kv(Q, K, V, pos, heads, kv_heads, hd, p, kc, vc, std::span(rows).first(2)),
                    ragkv::Error);
    CHECK_THROWS_AS(b->rope_qk_scatter_kv(Q, K, V, pos, heads, kv_heads, hd, p, kc, kc, rows), ragkv::Error);
    CHECK_THROWS_AS(b->rope_qk_scatter_kv(Q, K, K, pos, heads, kv_heads, hd, p, kc, vc, rows), ragkv::Error);  // k is v
  }
  // q overlapping a destination: refused.
  Tensor Q = upload(*b, qv, n, heads * hd), K = upload(*b, kv, n, kv_heads * hd), V = upload(*b, vv, n, kv_heads * hd);
  const Tensor big = b->alloc(DType::f32, 16, heads * hd);
  const Tensor vc = b->alloc(DType::f32, 16, kv_heads * hd);
  CHECK_THROWS_AS(b->rope_qk_scatter_kv(big.slice_rows(0, n), K, V, pos, heads, kv_heads, hd, p,
                                        big.reshape(32, kv_heads * hd).slice_rows(0, 16), vc, rows),
                  ragkv::Error);
}

TEST_CASE("cpu backend: qkv_rope_scatter_kv is matmul_parts then rope_qk_scatter_kv, and checks both") {
  auto b = make_cpu_backend(2);
  const int n = 2, in = 64, heads = 4, kv_heads = 2, hd = 16;
  const std::vector<int32_t> pos = {40, 41}, rows = {40, 41};
  RopeParams p;
  p.n_rot = hd;
  p.neox = true;
  auto wq = random_vec(heads * hd * in, 41), wk = random_vec(kv_heads * hd * in, 42), wv = random_vec(kv_heads * hd * in, 43);
  auto bq = random_vec(heads * hd, 44);
  const GgufTensor tq = f32_matrix_tensor("blk.0.attn_q.weight", wq, heads * hd, in);
  const GgufTensor tk = f32_matrix_tensor("blk.0.attn_k.weight", wk, kv_heads * hd, in);
  const GgufTensor tv = f32_matrix_tensor("blk.0.attn_v.weight", wv, kv_heads * hd, in);
  const GgufTensor* parts[] = {&tq, &tk, &tv};
  const auto wqkv = b->load_weight_stack(parts, "blk.0.attn_qkv");
  const auto bias_q = weight_from(*b, bq, 1, heads * hd);
  const Weight* biases[3] = {bias_q.get(), nullptr, nullptr};
  const Tensor X = upload(*b, random_vec(n * in, 45), n, in);
  const auto run = [&](bool fused) {
    const Tensor q = b->alloc(DType::f32, n, heads * hd), k = b->alloc(DType::f32, n, kv_heads * hd),
                 v = b->alloc(DType::f32, n, kv_heads * hd);
    const Tensor kc = b->alloc(DType::f16, 64, kv_heads * hd), vc = b->alloc(DType::f16, 64, kv_heads * hd);
    b->fill_zero(kc);
    b->fill_zero(vc);
    const Tensor qkv[3] = {q, k, v};
    if (fused) {
      b->qkv_rope_scatter_kv(X, *wqkv, qkv, biases, Activations::f32, pos, heads, kv_heads, hd, p, kc, vc, rows);
    } else {
      b->matmul_parts(X, *wqkv, qkv, biases);
      b->rope_qk_scatter_kv(q, k, v, pos, heads, kv_heads, hd, p, kc, vc, rows);
    }
    std::vector<std::vector<float>> out;
    for (const Tensor& t : {q, k, v, kc, vc}) out.push_back(download(*b, t));
    return out;
  };
  CHECK(run(true) == run(false));
  // The stack's three parts into three outputs, each op's conditions, x kept off the outputs.
  const Tensor q = b->alloc(DType::f32, n, heads * hd), k = b->alloc(DType::f32, n, kv_heads * hd),
               v = b->alloc(DType::f32, n, kv_heads * hd);
  const Tensor kc = b->alloc(DType::f16, 64, kv_heads * hd), vc = b->alloc(DType::f16, 64, kv_heads * hd);
  const Tensor qkv[3] = {q, k, v};
  const auto wide = weight_from(*b, wq, heads * hd, in);
  CHECK_THROWS_AS(b->qkv_rope_scatter_kv(X, *wide, std::span(qkv).first(1), {}, Activations::f32, pos, heads, kv_heads,
                                         hd, p, kc, vc, rows),
                  ragkv::Error);
  CHECK_THROWS_AS(b->qkv_rope_scatter_kv(X, *wqkv, qkv, biases, Activations::f32, std::span(pos).first(1), heads,
                                         kv_heads, hd, p, kc, vc, rows),
                  ragkv::Error);
  CHECK_THROWS_AS(b->qkv_rope_scatter_kv(X, *wqkv, qkv, biases, Activations::f32, pos, heads, kv_heads, hd, p, kc, kc,
                                         rows),
                  ragkv::Error);
  const Tensor qx = b->alloc(DType::f32, n, heads * hd);
  const Tensor aliased[3] = {qx, k, v};
  CHECK_THROWS_AS(b->qkv_rope_scatter_kv(qx.reshape(n * heads * hd / in, in), *wqkv, aliased, biases, Activations::f32,
                                         pos, heads, kv_heads, hd, p, kc, vc, rows),
                  ragkv::Error);
}

TEST_CASE("cpu backend: rope matches the rotation formula, and inverse undoes it (f32 and f16)") {
  auto b = make_cpu_backend(2);
  const int n = 5, heads = 3, hd = 64;
  auto x = random_vec(n * heads * hd, 8);
  std::vector<int32_t> pos = {0, 1, 17, 1000, 7999};
  for (bool neox : {false, true}) {
    RopeParams p;
    p.n_rot = hd;
    p.freq_base = 100000.f;
    p.neox = neox;
    if (neox) p.freq_factors.assign(hd / 2, 1.f), p.freq_factors[3] = 8.f;
    Tensor X = upload(*b, x, n, heads * hd);
    b->rope(X, pos, heads, hd, p, false);
    std::vector<float> ref = x;
    for (int r = 0; r < n; ++r)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < hd / 2; ++i) {
          double theta = pos[r] * std::pow(double(p.freq_base), -2.0 * i / hd);
          if (!p.freq_factors.empty()) theta /= p.freq_factors[i];
          const int i0 = neox ? i : 2 * i, i1 = neox ? i + hd / 2 : 2 * i + 1;
          float* v = ref.data() + (r * heads + h) * hd;
          const double a = x[(r * heads + h) * hd + i0], c = x[(r * heads + h) * hd + i1];
          v[i0] = float(a * std::cos(theta) - c * std::sin(theta));
          v[i1] = float(a * std::sin(theta) + c * std::cos(theta));
        }
    // f32 angles at position ~8k lose a few ulps of the angle: 1e-3 absolute is the float limit.
    CHECK(max_rel_err(download(*b, X), ref) < 2e-3);
    b->rope(X, pos, heads, hd, p, true);
    CHECK(max_rel_err(download(*b, X), x) < 1e-5);

    // f16 storage (the KV-cache dtype): rotate in place, within f16 rounding.
    Tensor H = b->alloc(DType::f16, n, heads * hd);
    std::vector<f16_t> xh(x.size());
    fp32_to_fp16_row(x.data(), xh.data(), int64_t(x.size()));
    b->upload(H, xh.data());
    b->rope(H, pos, heads, hd, p, false);
    b->download(H, xh.data());
    std::vector<float> back(x.size());
    fp16_to_fp32_row(xh.data(), back.data(), int64_t(x.size()));
    CHECK(max_rel_err(back, ref) < 4e-3);
  }
}

// A decode step (one query row, f16 K/V, no segment mass) takes attention_one_query: the query
// heads of a KV head together, a group split between threads when there are fewer KV heads than
// threads. Against the naive softmax in double, and the same bits on one thread as on two.
TEST_CASE("cpu backend: decode attention equals naive masked softmax, the same bits on 1 and 2 threads") {
  auto b1 = make_cpu_backend(1);
  auto b2 = make_cpu_backend(2);
  struct Case { int n_kv, n_head, n_kv_head, hd, window; bool ascending; };
  for (Case c : {Case{5, 2, 1, 64, 0, true}, Case{300, 4, 1, 256, 0, true}, Case{200, 9, 3, 64, 0, false},
                 Case{300, 4, 1, 256, 64, true}, Case{150, 8, 2, 64, 0, true}, Case{90, 6, 6, 40, 0, false}}) {
    CAPTURE(c.n_kv);
    CAPTURE(c.n_head);
    CAPTURE(c.n_kv_head);
    const int qc = c.n_head * c.hd, kc = c.n_kv_head * c.hd;
    auto q = random_vec(size_t(qc), 21), k = random_vec(size_t(c.n_kv * kc), 22),
         v = random_vec(size_t(c.n_kv * kc), 23);
    std::vector<int32_t> kpos(c.n_kv);
    for (int j = 0; j < c.n_kv; ++j) kpos[j] = c.ascending ? j : (j * 7919) % c.n_kv;
    const int32_t qpos = c.n_kv - 1 - (c.ascending ? 0 : 3);
    std::vector<f16_t> kh(k.size()), vh(v.size());
    fp32_to_fp16_row(k.data(), kh.data(), int64_t(k.size()));
    fp32_to_fp16_row(v.data(), vh.data(), int64_t(v.size()));
    AttentionParams p{c.n_head, c.n_kv_head, c.hd, 1.f / std::sqrt(float(c.hd)), c.window, 0.f};
    std::vector<std::vector<float>> outs;
    for (Backend* b : {b1.get(), b2.get()}) {
      Tensor K = b->alloc(DType::f16, c.n_kv, kc), V = b->alloc(DType::f16, c.n_kv, kc);
      b->upload(K, kh.data());
      b->upload(V, vh.data());
      Tensor Q = upload(*b, q, 1, qc), O = b->alloc(DType::f32, 1, qc);
      b->attention(Q, std::span(&qpos, 1), K, V, kpos, c.n_kv, p, O, nullptr);
      outs.push_back(download(*b, O));
    }
    std::vector<float> ref(static_cast<size_t>(qc));
    for (int h = 0; h < c.n_head; ++h) {
      const int g = h / (c.n_head / c.n_kv_head);
      naive_head(q.data() + h * c.hd, kh, vh, kc, g * c.hd, c.hd, kpos, qpos, c.window, p.scale, &ref[h * c.hd]);
    }
    CHECK(max_rel_err(outs[0], ref) < 1e-4);
    CHECK(outs[0] == outs[1]);
  }
}

TEST_CASE("cpu backend: attention equals naive masked softmax (GQA, positions, window, segment mass)") {
  auto b = make_cpu_backend(2);
  struct Case { int n_q, n_kv, n_head, n_kv_head, hd, window; bool ascending; };
  for (Case c : {Case{1, 1, 2, 1, 64, 0, false}, Case{7, 33, 4, 2, 64, 0, false}, Case{33, 300, 3, 1, 32, 16, false},
                 Case{300, 300, 2, 2, 256, 0, false}, Case{300, 300, 2, 1, 64, 0, true},
                 Case{600, 700, 2, 2, 32, 64, true}}) {
    CAPTURE(c.n_q);
    CAPTURE(c.n_kv);
    CAPTURE(c.ascending);
    const int qc = c.n_head * c.hd, kc = c.n_kv_head * c.hd;
    auto q = random_vec(size_t(c.n_q * qc), 9), k = random_vec(size_t(c.n_kv * kc), 10), v = random_vec(size_t(c.n_kv * kc), 11);
    // Keys at shuffled absolute positions; queries at the last n_q of them, out of order.
    std::vector<int32_t> kpos(c.n_kv), qpos(c.n_q);
    // (or, ascending: a prefill, where blocks skip the keys they cannot see).
    for (int j = 0; j < c.n_kv; ++j) kpos[j] = c.ascending ? j : (j * 7919) % c.n_kv;
    for (int i = 0; i < c.n_q; ++i) qpos[i] = c.ascending ? c.n_kv - c.n_q + i : c.n_kv - 1 - (i * 3) % c.n_q;
    std::vector<f16_t> kh(k.size()), vh(v.size());
    fp32_to_fp16_row(k.data(), kh.data(), int64_t(k.size()));
    fp32_to_fp16_row(v.data(), vh.data(), int64_t(v.size()));
    Tensor K = b->alloc(DType::f16, c.n_kv, kc), V = b->alloc(DType::f16, c.n_kv, kc);
    b->upload(K, kh.data());
    b->upload(V, vh.data());
    Tensor Q = upload(*b, q, c.n_q, qc), O = b->alloc(DType::f32, c.n_q, qc);
    AttentionParams p{c.n_head, c.n_kv_head, c.hd, 1.f / std::sqrt(float(c.hd)), c.window, 0.f};
    std::vector<float> mass;
    SegmentMass seg{{0, c.n_kv / 3, c.n_kv}, &mass};
    b->attention(Q, qpos, K, V, kpos, c.n_kv, p, O, &seg);

    std::vector<float> totals;
    SegmentMass key_totals;
    key_totals.key_totals = true;
    key_totals.out = &totals;
    Tensor O2 = b->alloc(DType::f32, c.n_q, qc);
    b->attention(Q, qpos, K, V, kpos, c.n_kv, p, O2, &key_totals);

    std::vector<float> ref(size_t(c.n_q * qc));
    std::vector<float> ref_mass(size_t(c.n_q * c.n_head * 2), 0.f);
    std::vector<double> ref_totals(size_t(c.n_kv), 0.0);
    for (int i = 0; i < c.n_q; ++i)
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / (c.n_head / c.n_kv_head);
        const std::vector<double> pr = naive_head(&q[i * qc + h * c.hd], kh, vh, kc, g * c.hd, c.hd, kpos, qpos[i],
                                                  c.window, p.scale, &ref[i * qc + h * c.hd]);
        for (int j = 0; j < c.n_kv; ++j) ref_mass[(i * c.n_head + h) * 2 + (j >= c.n_kv / 3)] += float(pr[j]);
        for (int j = 0; j < c.n_kv; ++j) ref_totals[size_t(j)] += pr[j];
      }
    CHECK(max_rel_err(download(*b, O), ref) < 1e-4);
    REQUIRE(mass.size() == ref_mass.size());
    CHECK(max_rel_err(mass, ref_mass) < 1e-4);
    for (size_t i = 0; i < mass.size(); i += 2) CHECK(mass[i] + mass[i + 1] == doctest::Approx(1.0).epsilon(1e-4));
    // Key totals: each key's probability summed over every query row and head; the output is the
    // attention without mass, bit for bit.
    Tensor O3 = b->alloc(DType::f32, c.n_q, qc);
    b->attention(Q, qpos, K, V, kpos, c.n_kv, p, O3, nullptr);
    CHECK(download(*b, O2) == download(*b, O3));
    REQUIRE(totals.size() == size_t(c.n_kv));
    for (int j = 0; j < c.n_kv; ++j) CHECK(std::fabs(totals[size_t(j)] - ref_totals[size_t(j)]) <= 1e-4 * (1 + ref_totals[size_t(j)]));
  }
}

// Key totals: one call gives every row's attention (the same bits as a call without mass, so
// that prophet's first pass can ask a layer's own attention for its question's totals) and the
// key totals of rows [first_query, n_q) (SegmentMass::first_query; the same bits as a call of
// those rows alone).
TEST_CASE("cpu backend: key totals from a first query row come with every row's attention") {
  auto b = make_cpu_backend(2);
  const int n_q = 40, n_kv = 300, n_head = 4, n_kv_head = 2, hd = 64, qc = n_head * hd, kc = n_kv_head * hd;
  auto q = random_vec(size_t(n_q * qc), 31), k = random_vec(size_t(n_kv * kc), 32), v = random_vec(size_t(n_kv * kc), 33);
  std::vector<int32_t> kpos(n_kv), qpos(n_q);
  for (int j = 0; j < n_kv; ++j) kpos[j] = j;
  for (int i = 0; i < n_q; ++i) qpos[i] = n_kv - n_q + i;
  std::vector<f16_t> kh(k.size()), vh(v.size());
  fp32_to_fp16_row(k.data(), kh.data(), int64_t(k.size()));
  fp32_to_fp16_row(v.data(), vh.data(), int64_t(v.size()));
  Tensor K = b->alloc(DType::f16, n_kv, kc), V = b->alloc(DType::f16, n_kv, kc);
  b->upload(K, kh.data());
  b->upload(V, vh.data());
  Tensor Q = upload(*b, q, n_q, qc);
  AttentionParams p{n_head, n_kv_head, hd, 1.f / std::sqrt(float(hd)), 0, 0.f};
  Tensor plain = b->alloc(DType::f32, n_q, qc);
  b->attention(Q, qpos, K, V, kpos, n_kv, p, plain, nullptr);
  for (int first : {0, 1, 28, n_q - 1, n_q}) {
    CAPTURE(first);
    std::vector<float> fused_totals, alone_totals;
    SegmentMass fused;
    fused.key_totals = true;
    fused.first_query = first;
    fused.out = &fused_totals;
    Tensor out = b->alloc(DType::f32, n_q, qc);
    b->attention(Q, qpos, K, V, kpos, n_kv, p, out, &fused);
    CHECK(download(*b, out) == download(*b, plain));
    REQUIRE(fused_totals.size() == size_t(n_kv));
    if (first == n_q) {
      CHECK(std::all_of(fused_totals.begin(), fused_totals.end(), [](float t) { return t == 0.f; }));
      continue;
    }
    if (first == 0) {  // against the naive softmax in double (the path below is the same code)
      std::vector<double> ref(static_cast<size_t>(n_kv), 0.0);
      std::vector<float> o(static_cast<size_t>(hd));
      for (int i = 0; i < n_q; ++i)
        for (int h = 0; h < n_head; ++h) {
          const std::vector<double> pr = naive_head(&q[size_t(i * qc + h * hd)], kh, vh, kc, (h / 2) * hd, hd, kpos,
                                                    qpos[size_t(i)], 0, p.scale, o.data());
          for (int j = 0; j < n_kv; ++j) ref[size_t(j)] += pr[size_t(j)];
        }
      for (int j = 0; j < n_kv; ++j) CHECK(std::fabs(fused_totals[size_t(j)] - ref[size_t(j)]) <= 1e-4 * (1 + ref[size_t(j)]));
    }
    SegmentMass alone;
    alone.key_totals = true;
    alone.out = &alone_totals;
    Tensor out_alone = b->alloc(DType::f32, n_q - first, qc);
    b->attention(Q.slice_rows(first, n_q - first), std::span(qpos).subspan(size_t(first)), K, V, kpos, n_kv, p,
                 out_alone, &alone);
    CHECK(fused_totals == alone_totals);
    double sum = 0;
    for (float t : fused_totals) sum += t;
    CHECK(sum == doctest::Approx(double((n_q - first) * n_head)).epsilon(1e-5));
  }
  // Out of range, or without key totals: an internal error, not a silent misuse.
  std::vector<float> t;
  SegmentMass bad;
  bad.key_totals = true;
  bad.first_query = n_q + 1;
  bad.out = &t;
  Tensor out = b->alloc(DType::f32, n_q, qc);
  CHECK_THROWS_AS(b->attention(Q, qpos, K, V, kpos, n_kv, p, out, &bad), ragkv::Error);
  SegmentMass segs{{0, n_kv}, &t};
  segs.first_query = 3;
  CHECK_THROWS_AS(b->attention(Q, qpos, K, V, kpos, n_kv, p, out, &segs), ragkv::Error);
}

TEST_CASE("cpu backend: scatter and gather rows, f32 to f16") {
  auto b = make_cpu_backend(1);
  auto x = random_vec(3 * 8, 12);
  Tensor X = upload(*b, x, 3, 8), D = b->alloc(DType::f16, 10, 8);
  b->fill_zero(D);
  std::vector<int32_t> rows = {9, 0, 4};
  b->scatter_rows(X, D, rows);
  std::vector<f16_t> h(80);
  b->download(D, h.data());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 8; ++j) CHECK(fp16_to_fp32(h[rows[i] * 8 + j]) == doctest::Approx(x[i * 8 + j]).epsilon(1e-3));
  CHECK(h[1 * 8] == 0);
  Tensor G = b->alloc(DType::f32, 2, 8);
  b->gather_rows(X, G, std::vector<int32_t>{2, 0});
  auto g = download(*b, G);
  CHECK(g[0] == x[16]);
  CHECK(g[8] == x[0]);

  // scatter_kv_rows: K's and V's scatters, through the same rows; the four tensors kept apart.
  auto y = random_vec(3 * 8, 14);
  Tensor Y = upload(*b, y, 3, 8), DK = b->alloc(DType::f16, 10, 8), DV = b->alloc(DType::f16, 10, 8);
  b->fill_zero(DK);
  b->fill_zero(DV);
  b->scatter_kv_rows(X, Y, DK, DV, rows);
  std::vector<f16_t> hk(80), hv(80), hy(80);
  b->download(DK, hk.data());
  b->download(DV, hv.data());
  CHECK(hk == h);
  Tensor DY = b->alloc(DType::f16, 10, 8);
  b->fill_zero(DY);
  b->scatter_rows(Y, DY, rows);
  b->download(DY, hy.data());
  CHECK(hv == hy);
  CHECK_THROWS_AS(b->scatter_kv_rows(X, Y, DK, DK, rows), ragkv::Error);  // K and V into one tensor
  CHECK_THROWS_AS(b->scatter_kv_rows(X, Y, DK, DV.slice_rows(0, 9), rows), ragkv::Error);
  CHECK_THROWS_AS(b->scatter_kv_rows(X, Y, DK, b->alloc(DType::f32, 10, 8), rows), ragkv::Error);
}

TEST_CASE("cpu backend: copy is exact, and mismatched shapes, dtypes and overlaps are refused") {
  auto b = make_cpu_backend(1);
  auto x = random_vec(4 * 8, 13);
  Tensor X = upload(*b, x, 4, 8), D = b->alloc(DType::f32, 6, 8);
  b->fill_zero(D);
  b->copy(X.slice_rows(1, 3), D.slice_rows(2, 3));
  auto d = download(*b, D);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 8; ++j) CHECK(d[(2 + i) * 8 + j] == x[(1 + i) * 8 + j]);
  CHECK(d[1 * 8 + 7] == 0);
  CHECK(d[5 * 8] == 0);
  CHECK_THROWS_AS(b->copy(X, D.slice_rows(0, 3)), ragkv::Error);
  CHECK_THROWS_AS(b->copy(X, b->alloc(DType::f16, 4, 8)), ragkv::Error);
  CHECK_THROWS_AS(b->copy(D.slice_rows(0, 3), D.slice_rows(2, 3)), ragkv::Error);
}

TEST_CASE("cpu backend: row_sq_dist is the per-row squared distance to gathered f16 and f32 rows") {
  auto b = ragkv::make_cpu_backend(2);
  for (const auto& [n, rows_b, d] : {std::tuple{1, 3, 5}, {7, 11, 64}, {33, 40, 192}}) {
    const auto a = random_vec(size_t(n * d), 11);
    const auto src = random_vec(size_t(rows_b * d), 12);
    std::vector<int32_t> rows(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) rows[size_t(i)] = (i * 7 + 3) % rows_b;
    const ragkv::Tensor ta = upload(*b, a, n, d);
    ragkv::Tensor b32 = upload(*b, src, rows_b, d);
    ragkv::Tensor b16 = b->alloc(ragkv::DType::f16, rows_b, d);
    std::vector<uint16_t> h16(src.size());
    for (size_t i = 0; i < src.size(); ++i) h16[i] = ragkv::fp32_to_fp16(src[i]);
    b->upload(b16, h16.data());
    for (const ragkv::Tensor* t : {&b32, &b16}) {
      ragkv::Tensor out = b->alloc(ragkv::DType::f32, n, 1);
      b->row_sq_dist(ta, *t, rows, out);
      const auto got = download(*b, out);
      for (int i = 0; i < n; ++i) {
        double ref = 0;
        for (int c = 0; c < d; ++c) {
          const float bv = t->dtype == ragkv::DType::f16 ? ragkv::fp16_to_fp32(h16[size_t(rows[size_t(i)] * d + c)])
                                                         : src[size_t(rows[size_t(i)] * d + c)];
          const double e = double(a[size_t(i * d + c)]) - bv;
          ref += e * e;
        }
        CHECK(got[size_t(i)] == doctest::Approx(ref).epsilon(1e-6));
      }
    }
  }
}

// Fuzz regression (fuzz/fuzz-gguf.cpp, fuzz-safetensors.cpp): a model whose weights hold NaN or
// infinities (a corrupt file) made exp_f32 convert a NaN to int — undefined behaviour, which
// UBSan stopped on in the attention softmax. What a NaN row computes is unspecified (NaN or any
// value), but nothing may be undefined (`make test-sanitize` runs this under UBSan) and the other
// rows must not notice.
TEST_CASE("cpu backend: NaN and infinite inputs are never undefined behaviour (fuzz regression)") {
  auto b = make_cpu_backend(1);
  // NaNs of both signs: which one reaches exp depends on it (the clamp compares bits).
  const std::vector<float> q = {NAN, 1.f, 2.f, INFINITY, -NAN, 1.f, 2.f, 0.f, 0.5f, -1.f, 0.25f, 2.f};
  const std::vector<float> k = random_vec(8, 1), v = random_vec(8, 2);
  std::vector<f16_t> kh(8), vh(8);
  fp32_to_fp16_row(k.data(), kh.data(), 8);
  fp32_to_fp16_row(v.data(), vh.data(), 8);
  Tensor K = b->alloc(DType::f16, 2, 4), V = b->alloc(DType::f16, 2, 4);
  b->upload(K, kh.data());
  b->upload(V, vh.data());
  const std::vector<int32_t> qpos = {1, 1, 1}, kpos = {0, 1};
  const AttentionParams p{1, 1, 4, 0.5f, 0, 0.f};
  Tensor Q = upload(*b, q, 3, 4), O = b->alloc(DType::f32, 3, 4);
  b->attention(Q, qpos, K, V, kpos, 2, p, O);
  // The same batch with the first two rows finite: the last row's output is the same bits (the
  // same code path; a single-row call may round differently where the compiler vectorises the two
  // paths differently, as at -O1 in the sanitizer build).
  std::vector<float> clean = q;
  std::fill(clean.begin(), clean.begin() + 8, 0.5f);
  Tensor Qc = upload(*b, clean, 3, 4), Oc = b->alloc(DType::f32, 3, 4);
  b->attention(Qc, qpos, K, V, kpos, 2, p, Oc);
  const std::vector<float> o = download(*b, O), oc = download(*b, Oc);
  CHECK(std::vector<float>(o.begin() + 8, o.end()) == std::vector<float>(oc.begin() + 8, oc.end()));

  const std::vector<float> x = {NAN, 1.f, -INFINITY, INFINITY};
  Tensor X = upload(*b, x, 1, 4), Y = b->alloc(DType::f32, 1, 4);
  b->gelu_erf(X, Y);
  const std::vector<float> y = download(*b, Y);
  CHECK(std::isnan(y[0]));
  CHECK(y[1] == doctest::Approx(0.5 * (1 + std::erf(1 / std::sqrt(2.0)))).epsilon(1e-6));
}
