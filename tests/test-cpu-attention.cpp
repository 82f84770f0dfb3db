// The CPU backend's tiled prompt attention (core/backend/cpu-attention.cpp): against the SGEMM path on
// the same keys given out of order (which it does not take), against double precision, each row's
// bits independent of the other rows in the call and of the thread count, and both kernel tables.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/backend/backend.h"
#include "core/backend/cpu-attention.h"
#include "core/backend/cpu-backend.h"
#include "core/backend/quant-kernels.h"
#include "core/format/fp16.h"
#include "tests/test-ops-util.h"

using namespace ragkv;
using namespace ragkv::test;

namespace {

struct Problem {
  int n_head, n_kv_head, hd, window;
  float softcap;
  int64_t n_kv, n_q;
  std::vector<float> q;
  std::vector<f16_t> k, v;
  std::vector<int32_t> kpos, qpos;
  int qc() const { return n_head * hd; }
  int kc() const { return n_kv_head * hd; }
};

// Keys at ascending positions with a gap (positions are not row indices); queries at a sorted
// random subset of the key positions, plus one before the first key (it sees nothing).
Problem make_problem(int n_head, int n_kv_head, int hd, int window, float softcap, int64_t n_kv, int64_t n_q,
                     uint64_t seed) {
  Problem pr{n_head, n_kv_head, hd, window, softcap, n_kv, n_q, {}, {}, {}, {}, {}};
  pr.q = random_vec(size_t(n_q * pr.qc()), seed, 2.f);
  const std::vector<float> k = random_vec(size_t(n_kv * pr.kc()), seed + 1), v = random_vec(k.size(), seed + 2);
  pr.k.resize(k.size());
  pr.v.resize(v.size());
  fp32_to_fp16_row(k.data(), pr.k.data(), int64_t(k.size()));
  fp32_to_fp16_row(v.data(), pr.v.data(), int64_t(v.size()));
  for (int64_t j = 0; j < n_kv; ++j) pr.kpos.push_back(int32_t(5 + j + (j >= n_kv / 2 ? 7 : 0)));
  std::mt19937_64 rng(seed + 3);
  std::vector<int32_t> pick(pr.kpos.begin(), pr.kpos.end());
  std::shuffle(pick.begin(), pick.end(), rng);
  pick.resize(size_t(n_q - 1));
  pick.push_back(2);
  std::sort(pick.begin(), pick.end());
  pr.qpos = pick;
  return pr;
}

std::vector<float> run_attention(Backend& b, const Problem& pr, const std::vector<int64_t>& rows,
                                 const std::vector<int64_t>& key_order = {}) {
  std::vector<float> q;
  std::vector<int32_t> qpos;
  for (int64_t i : rows) {
    q.insert(q.end(), pr.q.begin() + i * pr.qc(), pr.q.begin() + (i + 1) * pr.qc());
    qpos.push_back(pr.qpos[size_t(i)]);
  }
  std::vector<f16_t> k = pr.k, v = pr.v;
  std::vector<int32_t> kpos = pr.kpos;
  if (!key_order.empty())
    for (size_t j = 0; j < key_order.size(); ++j) {
      const size_t from = size_t(key_order[j]);
      std::copy_n(pr.k.begin() + from * pr.kc(), pr.kc(), k.begin() + j * pr.kc());
      std::copy_n(pr.v.begin() + from * pr.kc(), pr.kc(), v.begin() + j * pr.kc());
      kpos[j] = pr.kpos[from];
    }
  Tensor K = b.alloc(DType::f16, pr.n_kv, pr.kc()), V = b.alloc(DType::f16, pr.n_kv, pr.kc());
  b.upload(K, k.data());
  b.upload(V, v.data());
  const int64_t n = int64_t(rows.size());
  Tensor Q = upload(b, q, n, pr.qc()), O = b.alloc(DType::f32, n, pr.qc());
  const AttentionParams p{pr.n_head, pr.n_kv_head, pr.hd, 1.f / std::sqrt(float(pr.hd)), pr.window, pr.softcap};
  b.attention(Q, qpos, K, V, kpos, pr.n_kv, p, O);
  return download(b, O);
}

// Row i of a result over rows.
std::vector<float> row_of(const std::vector<float>& out, const Problem& pr, size_t at) {
  return {out.begin() + int64_t(at) * pr.qc(), out.begin() + int64_t(at + 1) * pr.qc()};
}

// Attention in double from the definition (softcap included).
std::vector<float> reference(const Problem& pr) {
  std::vector<float> out(size_t(pr.n_q * pr.qc()), 0.f);
  const double scale = 1.0 / std::sqrt(double(pr.hd));
  for (int64_t i = 0; i < pr.n_q; ++i)
    for (int h = 0; h < pr.n_head; ++h) {
      const int col = (h / (pr.n_head / pr.n_kv_head)) * pr.hd;
      const int32_t qp = pr.qpos[size_t(i)];
      std::vector<double> s(size_t(pr.n_kv), -INFINITY);
      double mx = -INFINITY;
      for (int64_t j = 0; j < pr.n_kv; ++j) {
        const int32_t kp = pr.kpos[size_t(j)];
        if (kp > qp || (pr.window > 0 && kp <= qp - pr.window)) continue;
        double d = 0;
        for (int c = 0; c < pr.hd; ++c)
          d += double(pr.q[size_t(i * pr.qc() + h * pr.hd + c)]) * fp16_to_fp32(pr.k[size_t(j * pr.kc() + col + c)]);
        d *= scale;
        if (pr.softcap > 0) d = pr.softcap * std::tanh(d / pr.softcap);
        s[size_t(j)] = d;
        mx = std::max(mx, d);
      }
      if (std::isinf(mx)) continue;  // sees no key: zeros
      double sum = 0;
      for (double& e : s) sum += (e = std::isinf(e) ? 0 : std::exp(e - mx));
      for (int c = 0; c < pr.hd; ++c) {
        double o = 0;
        for (int64_t j = 0; j < pr.n_kv; ++j) o += s[size_t(j)] / sum * fp16_to_fp32(pr.v[size_t(j * pr.kc() + col + c)]);
        out[size_t(i * pr.qc() + h * pr.hd + c)] = float(o);
      }
    }
  return out;
}

}  // namespace

TEST_CASE("cpu attention: tiles with an online softmax equal the definition and the SGEMM path (windows, softcap, GQA)") {
  auto b = make_cpu_backend(2);
  struct Case { int n_head, n_kv_head, hd, window; float softcap; int64_t n_kv, n_q; };
  for (Case c : {Case{4, 2, 64, 0, 0.f, 300, 70}, Case{2, 1, 32, 48, 0.f, 200, 41}, Case{3, 1, 40, 0, 30.f, 130, 9},
                 Case{2, 2, 128, 100, 0.f, 520, 130}}) {
    CAPTURE(c.hd);
    CAPTURE(c.window);
    const Problem pr = make_problem(c.n_head, c.n_kv_head, c.hd, c.window, c.softcap, c.n_kv, c.n_q, uint64_t(c.hd));
    std::vector<int64_t> all(size_t(pr.n_q));
    std::iota(all.begin(), all.end(), int64_t(0));
    const std::vector<float> tiled = run_attention(*b, pr, all);
    CHECK(max_rel_err(tiled, reference(pr)) < 1e-4);
    // The same keys out of order take the SGEMM path (scores of whole blocks, masked softmax).
    std::vector<int64_t> shuffled(size_t(pr.n_kv));
    std::iota(shuffled.begin(), shuffled.end(), int64_t(0));
    std::mt19937_64 rng(7);
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    CHECK(max_rel_err(tiled, run_attention(*b, pr, all, shuffled)) < 1e-4);
    // The query before every key gets zeros.
    const std::vector<float> none = row_of(tiled, pr, 0);
    CHECK(std::all_of(none.begin(), none.end(), [](float x) { return x == 0.f; }));
  }
}

TEST_CASE("cpu attention: a row's tiled result has the same bits in any batch, in any order, on 1 or 2 threads") {
  auto b1 = make_cpu_backend(1), b2 = make_cpu_backend(2);
  for (int window : {0, 64}) {
    CAPTURE(window);
    const Problem pr = make_problem(4, 1, 64, window, 0.f, 700, 90, 11);
    std::vector<int64_t> all(size_t(pr.n_q));
    std::iota(all.begin(), all.end(), int64_t(0));
    const std::vector<float> ref = run_attention(*b2, pr, all);
    CHECK(run_attention(*b1, pr, all) == ref);
    // Reversed, and every third row with its neighbours gone: each row keeps its bits.
    std::vector<int64_t> reversed(all.rbegin(), all.rend());
    const std::vector<float> rev = run_attention(*b2, pr, reversed);
    std::vector<int64_t> thirds;
    for (int64_t i = 1; i < pr.n_q; i += 3) thirds.push_back(i);
    const std::vector<float> sub = run_attention(*b2, pr, thirds);
    for (size_t at = 0; at < reversed.size(); ++at) CHECK(row_of(rev, pr, at) == row_of(ref, pr, size_t(reversed[at])));
    for (size_t at = 0; at < thirds.size(); ++at) CHECK(row_of(sub, pr, at) == row_of(ref, pr, size_t(thirds[at])));
  }
}

TEST_CASE("cpu attention: the portable and the AVX2 tile kernels both give the definition") {
  const Problem pr = make_problem(4, 2, 72, 0, 0.f, 260, 33, 21);  // 72: a tail of 8 past the 16-wide chunks
  const AttentionParams p{pr.n_head, pr.n_kv_head, pr.hd, 1.f / std::sqrt(float(pr.hd)), 0, 0.f};
  auto b = make_cpu_backend(2);
  Tensor K = b->alloc(DType::f16, pr.n_kv, pr.kc()), V = b->alloc(DType::f16, pr.n_kv, pr.kc());
  b->upload(K, pr.k.data());
  b->upload(V, pr.v.data());
  Tensor Q = upload(*b, pr.q, pr.n_q, pr.qc()), O = b->alloc(DType::f32, pr.n_q, pr.qc());
  const std::vector<float> ref = reference(pr);
  std::vector<const QuantKernels*> tables{&quant_kernels_scalar()};
  if (quant_kernels_avx2()) tables.push_back(quant_kernels_avx2());
  for (const QuantKernels* t : tables) {
    CAPTURE(t->name);
    attention_tiled(*t, Q, pr.qpos, K, V, pr.kpos, pr.n_kv, p, O, 2);
    CHECK(max_rel_err(download(*b, O), ref) < 1e-4);
  }
}
