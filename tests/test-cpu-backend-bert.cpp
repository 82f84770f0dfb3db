// CPU backend ops the BERT encoder adds (layer_norm, gelu_erf, non-causal attention with its
// head-parallel schedule and vectorised softmax) against plain scalar references written from the
// formulas, over shapes with odd sizes.
#include <doctest/doctest.h>

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

TEST_CASE("cpu backend bert: layer_norm equals (x - mean) / sqrt(var + eps) * w + b") {
  auto b = make_cpu_backend(2);
  for (auto [rows, cols] : {std::pair{1, 1}, {3, 7}, {17, 384}, {5, 1001}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    // A large mean checks the variance has no cancellation.
    auto x = random_vec(size_t(rows * cols), 21, 2.f, 50.f), w = random_vec(size_t(cols), 22), bias = random_vec(size_t(cols), 23);
    auto W = vector_weight(*b, w), B = vector_weight(*b, bias);
    const float eps = 1e-12f;
    std::vector<float> ref(x.size());
    for (int i = 0; i < rows; ++i) {
      double mean = 0, var = 0;
      for (int j = 0; j < cols; ++j) mean += x[i * cols + j];
      mean /= cols;
      for (int j = 0; j < cols; ++j) var += (x[i * cols + j] - mean) * (x[i * cols + j] - mean);
      var /= cols;
      for (int j = 0; j < cols; ++j)
        ref[i * cols + j] = float((x[i * cols + j] - mean) / std::sqrt(var + eps) * w[j] + bias[j]);
    }
    Tensor X = upload(*b, x, rows, cols), Y = b->alloc(DType::f32, rows, cols);
    b->layer_norm(X, *W, *B, eps, Y);
    CHECK(max_rel_err(download(*b, Y), ref) < 1e-5);
    b->layer_norm(X, *W, *B, eps, X);  // in place
    CHECK(max_rel_err(download(*b, X), ref) < 1e-5);
  }
  auto x = random_vec(12, 1);
  std::vector<float> w(5, 1.f), bias(4, 0.f);
  auto W = vector_weight(*b, w), B = vector_weight(*b, bias);
  Tensor X = upload(*b, x, 3, 4);
  CHECK_THROWS_AS(b->layer_norm(X, *W, *B, 1e-5f, X), Error);
}

TEST_CASE("cpu backend bert: gelu_erf equals x/2 * (1 + erf(x/sqrt 2))") {
  auto b = make_cpu_backend(2);
  auto x = random_vec(3 * 1537, 31, 3.f);
  x[0] = 0.f;
  x[1] = -10.f;
  x[2] = 10.f;
  std::vector<float> ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) ref[i] = float(0.5 * x[i] * (1.0 + std::erf(double(x[i]) / std::sqrt(2.0))));
  Tensor X = upload(*b, x, 3, 1537), Y = b->alloc(DType::f32, 3, 1537);
  b->gelu_erf(X, Y);
  CHECK(max_rel_err(download(*b, Y), ref) < 1e-6);
  b->gelu_erf(X, X);
  CHECK(max_rel_err(download(*b, X), ref) < 1e-6);
  // Not the tanh approximation: they differ by ~1e-4 around |x| ≈ 2.
  Tensor G = upload(*b, std::vector<float>{2.f}, 1, 1), U = upload(*b, std::vector<float>{1.f}, 1, 1);
  Tensor T = b->alloc(DType::f32, 1, 1), E = b->alloc(DType::f32, 1, 1);
  b->geglu(G, U, T);
  b->gelu_erf(G, E);
  CHECK(std::fabs(download(*b, T)[0] - download(*b, E)[0]) > 1e-5);
}

TEST_CASE("cpu backend bert: non-causal attention equals softmax over every key") {
  auto b = make_cpu_backend(2);
  // q_scale 40: logits spread over hundreds, so most exp arguments fall below exp_f32's range.
  struct Case { int n_q, n_kv, n_head, n_kv_head, hd; bool f16; float q_scale = 1.f; };
  for (Case c : {Case{1, 1, 1, 1, 8, false}, Case{7, 7, 12, 12, 32, false}, Case{5, 33, 4, 2, 16, true},
                 Case{300, 300, 3, 3, 32, false}, Case{257, 129, 2, 1, 64, true}, Case{9, 40, 2, 2, 32, false, 40.f}}) {
    CAPTURE(c.n_q);
    CAPTURE(c.n_kv);
    CAPTURE(c.f16);
    const int qc = c.n_head * c.hd, kc = c.n_kv_head * c.hd;
    auto q = random_vec(size_t(c.n_q * qc), 41, c.q_scale), k = random_vec(size_t(c.n_kv * kc), 42), v = random_vec(size_t(c.n_kv * kc), 43);
    Tensor K, V;
    if (c.f16) {
      std::vector<f16_t> kh(k.size()), vh(v.size());
      fp32_to_fp16_row(k.data(), kh.data(), int64_t(k.size()));
      fp32_to_fp16_row(v.data(), vh.data(), int64_t(v.size()));
      for (size_t i = 0; i < k.size(); ++i) k[i] = fp16_to_fp32(kh[i]), v[i] = fp16_to_fp32(vh[i]);
      K = b->alloc(DType::f16, c.n_kv, kc);
      V = b->alloc(DType::f16, c.n_kv, kc);
      b->upload(K, kh.data());
      b->upload(V, vh.data());
    } else {
      K = upload(*b, k, c.n_kv, kc);
      V = upload(*b, v, c.n_kv, kc);
    }
    // Positions ascending, queries at the start: causal attention would hide most keys.
    std::vector<int32_t> kpos(c.n_kv), qpos(c.n_q);
    for (int j = 0; j < c.n_kv; ++j) kpos[j] = j;
    for (int i = 0; i < c.n_q; ++i) qpos[i] = i % c.n_kv;
    Tensor Q = upload(*b, q, c.n_q, qc), O = b->alloc(DType::f32, c.n_q, qc);
    AttentionParams p;
    p.n_head = c.n_head;
    p.n_kv_head = c.n_kv_head;
    p.head_dim = c.hd;
    p.scale = 1.f / std::sqrt(float(c.hd));
    p.causal = false;
    std::vector<float> mass;
    SegmentMass seg{{0, c.n_kv / 3, c.n_kv}, &mass};
    b->attention(Q, qpos, K, V, kpos, c.n_kv, p, O, &seg);

    std::vector<float> ref(size_t(c.n_q * qc)), ref_mass(size_t(c.n_q * c.n_head * 2), 0.f);
    for (int i = 0; i < c.n_q; ++i)
      for (int h = 0; h < c.n_head; ++h) {
        const int g = h / (c.n_head / c.n_kv_head);
        std::vector<double> s(c.n_kv);
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < c.n_kv; ++j) {
          double d = 0;
          for (int t = 0; t < c.hd; ++t) d += double(q[i * qc + h * c.hd + t]) * k[j * kc + g * c.hd + t];
          mx = std::max(mx, s[j] = d * p.scale);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int t = 0; t < c.hd; ++t) {
          double o = 0;
          for (int j = 0; j < c.n_kv; ++j) o += s[j] / sum * v[j * kc + g * c.hd + t];
          ref[i * qc + h * c.hd + t] = float(o);
        }
        for (int j = 0; j < c.n_kv; ++j) ref_mass[(i * c.n_head + h) * 2 + (j >= c.n_kv / 3)] += float(s[j] / sum);
      }
    CHECK(max_rel_err(download(*b, O), ref) < 1e-4);
    CHECK(max_rel_err(mass, ref_mass) < 1e-4);
  }
}

TEST_CASE("cpu backend bert: causal attention is unchanged by the causal flag's default") {
  auto b = make_cpu_backend(1);
  const int n = 9, hd = 8;
  auto q = random_vec(n * hd, 51), k = random_vec(n * hd, 52), v = random_vec(n * hd, 53);
  Tensor Q = upload(*b, q, n, hd), K = upload(*b, k, n, hd), V = upload(*b, v, n, hd);
  Tensor O1 = b->alloc(DType::f32, n, hd), O2 = b->alloc(DType::f32, n, hd);
  std::vector<int32_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = i;
  AttentionParams p;
  p.n_head = p.n_kv_head = 1;
  p.head_dim = hd;
  p.scale = 0.3f;
  b->attention(Q, pos, K, V, pos, n, p, O1);
  auto o1 = download(*b, O1);
  // The first query sees only the first key: its output is that key's value.
  for (int t = 0; t < hd; ++t) CHECK(o1[t] == doctest::Approx(v[t]));
  p.causal = false;
  b->attention(Q, pos, K, V, pos, n, p, O2);
  auto o2 = download(*b, O2);
  // The last query sees every key either way.
  for (int t = 0; t < hd; ++t) CHECK(o1[(n - 1) * hd + t] == doctest::Approx(o2[(n - 1) * hd + t]));
  bool differs = false;
  for (int t = 0; t < hd; ++t) differs |= std::fabs(o1[t] - o2[t]) > 1e-4;
  CHECK(differs);
  p.sliding_window = 4;
  CHECK_THROWS_AS(b->attention(Q, pos, K, V, pos, n, p, O2), Error);
}
