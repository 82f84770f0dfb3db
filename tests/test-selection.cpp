// Each selection method of blend on a random model chooses the rows its definition names. With a
// single check layer (layer 1), blend computes every candidate on layers 0 and 1, so the K/V it
// scores there are full recompute's; the test computes each method's scores independently from
// full's and reuse's KV (and, for the question method, full's layer-1 queries) and checks the
// kept rows are the top ones (up to near-ties from the different row grouping of the GEMMs).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "core/backend/cpu-backend.h"
#include "core/format/fp16.h"
#include "core/kv/kv-store.h"
#include "core/kv/kv-tiers.h"
#include "core/model/model.h"
#include "core/model/random-model.h"
#include "core/rag/cache-keys.h"
#include "core/rag/fusor.h"
#include "core/rag/plan.h"
#include "core/rag/precompute.h"
#include "core/rag/prompt.h"
#include "retrieval/chunker.h"
#include "tests/test-tempdir.h"

namespace {

using namespace ragkv;

struct World {
  test::TempDir dir{"selection"};
  std::unique_ptr<Backend> backend = make_cpu_backend(1);
  std::unique_ptr<Model> model;
  std::unique_ptr<PromptFormat> format;
  std::vector<Chunk> chunks;
  std::unique_ptr<KvStore> store;
  std::unique_ptr<KvTiers> tiers;
  RagPrompt prompt;
  World() {
    RandomModelSpec s;
    s.n_layer = 3;
    s.n_ctx = 512;
    const std::string path = (dir.path / "random.gguf").string();
    write_random_model(s, path);
    model = std::make_unique<Model>(path, *backend);
    format = std::make_unique<PromptFormat>(*model);
    const char* texts[] = {"the river delta drops its sediment where the water slows down",
                           "honey bees dance on the comb to show where the flowers are",
                           "a glacier grinds rock into flour and leaves moraines behind"};
    for (int i = 0; i < 3; ++i) {
      Chunk c;
      c.id = fmt::format("c{}", i);
      c.doc = c.id;
      c.text = texts[i];
      chunks.push_back(c);
    }
    std::vector<const Chunk*> ptrs;
    for (const Chunk& c : chunks) ptrs.push_back(&c);
    const CacheKeys keys(*model, *format);
    store = std::make_unique<KvStore>(KvStore::open_for_write(dir.path / "store", keys.store_info()));
    precompute_chunks(*model, *format, *store, ptrs);
    tiers = std::make_unique<KvTiers>(*store);
    prompt = format->build(ptrs, "where do bees dance?");
  }
  PrefillPlan plan(Selection sel, double r = 0.3) const {
    BlendParams b;
    b.selection = sel;
    b.recompute_ratio = r;
    b.check_layers = 1;
    const CacheKeys keys(*model, *format);
    return plan_prefill(prompt, ReuseMode::blend, b, model->config().n_layer, tier_lookup(keys, tiers.get()));
  }
  // K and V of layer l after a prefill of `mode`, as f32 [n][kv_dim].
  std::pair<std::vector<float>, std::vector<float>> kv_after(ReuseMode mode, int l) const {
    const CacheKeys keys(*model, *format);
    const PrefillPlan p = plan_prefill(prompt, mode, BlendParams{}, model->config().n_layer, tier_lookup(keys, tiers.get()));
    KvCache kv = model->new_kv_cache(prompt.n_tokens());
    Workspace ws;
    prefill_prompt(*model, prompt, p, kv, ws);
    return {download(kv.k[l]), download(kv.v[l])};
  }
  std::vector<float> download(const Tensor& t) const {
    std::vector<uint16_t> h(size_t(t.numel()));
    backend->download(t, h.data());
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = fp16_to_fp32(h[i]);
    return f;
  }
};

World& world() {
  static World w;
  return w;
}

// The kept candidates after the check layer of a blend prefill with `sel`.
std::set<int32_t> kept(const World& w, const PrefillPlan& p) {
  KvCache kv = w.model->new_kv_cache(w.prompt.n_tokens());
  Workspace ws;
  const PrefillResult r = prefill_prompt(*w.model, w.prompt, p, kv, ws);
  REQUIRE(r.stats.kept_after_check.size() == 1);
  std::set<int32_t> out;
  for (int32_t row : r.stats.kept_after_check[0])
    if (p.candidate[size_t(row)]) out.insert(row);
  return out;
}

// Checks that `got` holds `keep` candidates whose scores are the top ones: every kept score is at
// least every dropped score, up to a relative tolerance for near-ties.
void check_top(const PrefillPlan& p, const std::set<int32_t>& got, const std::vector<double>& score, size_t keep) {
  REQUIRE(got.size() == keep);
  double min_kept = INFINITY, max_dropped = -INFINITY;
  for (int64_t row = 0; row < p.n_tokens; ++row) {
    if (!p.candidate[size_t(row)]) continue;
    if (got.count(int32_t(row))) min_kept = std::min(min_kept, score[size_t(row)]);
    else max_dropped = std::max(max_dropped, score[size_t(row)]);
  }
  INFO("lowest kept score " << min_kept << ", highest dropped " << max_dropped);
  CHECK(min_kept >= max_dropped * (1 - 1e-3) - 1e-9);
}

std::vector<double> sq_dist(const std::vector<float>& a, const std::vector<float>& b, int64_t n, int64_t d,
                            int64_t col0 = 0, int64_t cols = -1) {
  if (cols < 0) cols = d;
  std::vector<double> out(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = col0; c < col0 + cols; ++c) {
      const double x = double(a[size_t(i * d + c)]) - double(b[size_t(i * d + c)]);
      out[size_t(i)] += x * x;
    }
  return out;
}

}  // namespace

TEST_CASE("selection: kv, v and head-v keep the candidates that deviate most from their caches") {
  const World& w = world();
  const ModelConfig& c = w.model->config();
  const int64_t n = w.prompt.n_tokens(), d = c.kv_dim();
  const auto [kf, vf] = w.kv_after(ReuseMode::full, 1);
  const auto [kr, vr] = w.kv_after(ReuseMode::reuse, 1);  // the caches, rotated to the prompt's positions
  const std::vector<double> dk = sq_dist(kf, kr, n, d), dv = sq_dist(vf, vr, n, d);

  const PrefillPlan pkv = w.plan(Selection::kv);
  REQUIRE(pkv.n_candidates > 10);
  REQUIRE(pkv.checks.size() == 1);
  std::vector<double> skv(dk.size());
  for (size_t i = 0; i < skv.size(); ++i) skv[i] = dk[i] + dv[i];
  check_top(pkv, kept(w, pkv), skv, pkv.checks[0].keep);

  const PrefillPlan pv = w.plan(Selection::v);
  check_top(pv, kept(w, pv), dv, pv.checks[0].keep);

  // head-v: each KV head's ‖ΔV‖² over its mean among the candidates, summed over heads.
  const PrefillPlan ph = w.plan(Selection::head_v);
  std::vector<double> sh(size_t(n), 0.0);
  for (int h = 0; h < c.n_head_kv; ++h) {
    const std::vector<double> dh = sq_dist(vf, vr, n, d, int64_t(h) * c.head_dim, c.head_dim);
    double mean = 0;
    for (int64_t i = 0; i < n; ++i)
      if (ph.candidate[size_t(i)]) mean += dh[size_t(i)] / double(ph.n_candidates);
    for (int64_t i = 0; i < n; ++i) sh[size_t(i)] += dh[size_t(i)] / mean;
  }
  check_top(ph, kept(w, ph), sh, ph.checks[0].keep);
  // The three rankings are not the same ranking (else the test could not tell them apart).
  CHECK((kept(w, pkv) != kept(w, pv) || kept(w, pv) != kept(w, ph)));
}

TEST_CASE("selection: question keeps the candidates the question's queries attend to most") {
  const World& w = world();
  const ModelConfig& c = w.model->config();
  Backend& b = *w.backend;
  const int64_t n = w.prompt.n_tokens(), qb = w.prompt.segments.back().begin, nq = n - qb;
  // Full recompute's layer-1 queries of the question rows, stepping the layer loop by hand.
  KvCache kv = w.model->new_kv_cache(n);
  Workspace ws;
  std::vector<int32_t> rows(static_cast<size_t>(n));
  std::iota(rows.begin(), rows.end(), 0);
  for (int64_t i = 0; i < n; ++i) kv.pos[size_t(i)] = int32_t(i);
  w.model->embed(w.prompt.ids, ws);
  for (int l = 0; l < 2; ++l) {
    w.model->layer_qkv(l, n, rows, ws);
    b.scatter_rows(ws.k.slice_rows(0, n), kv.k[l], rows);
    b.scatter_rows(ws.v.slice_rows(0, n), kv.v[l], rows);
    if (l == 0) w.model->layer_attend_ffn(l, n, rows, kv, n, ws);
  }
  SegmentMass mass;
  std::vector<float> per;
  mass.seg_begin.resize(size_t(n) + 1);
  std::iota(mass.seg_begin.begin(), mass.seg_begin.end(), int64_t(0));
  mass.out = &per;
  Tensor out = b.alloc(DType::f32, nq, c.q_dim());
  b.attention(ws.q.slice_rows(qb, nq), std::span(rows).subspan(size_t(qb)), kv.k[1], kv.v[1], kv.pos, n, c.attention(1),
              out, &mass);
  std::vector<double> score(size_t(n), 0.0);
  for (int64_t qh = 0; qh < nq * c.n_head; ++qh)
    for (int64_t j = 0; j < n; ++j) score[size_t(j)] += per[size_t(qh * n + j)];
  const PrefillPlan p = w.plan(Selection::question);
  check_top(p, kept(w, p), score, p.checks[0].keep);
}

TEST_CASE("selection: sink recomputes the first tokens of every repositioned chunk and nothing else") {
  const World& w = world();
  const PrefillPlan p = w.plan(Selection::sink, 0.25);
  CHECK(p.checks.empty());
  std::vector<int32_t> want;
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const SegmentPlan& seg = p.segments[s];
    if (seg.kv && !seg.exact())
      for (int64_t i = 0; i < int64_t(std::ceil(0.25 * double(seg.n_tokens))); ++i) want.push_back(int32_t(seg.begin + i));
    if (!seg.kv)
      for (int64_t i = seg.begin; i < seg.end(); ++i) want.push_back(int32_t(i));  // the question
  }
  CHECK(p.active == want);
  CHECK(p.n_forced == int64_t(want.size()) - w.prompt.segments.back().ids.size());

  // sink+v: 4 sink tokens per chunk, always recomputed, and the rest of the budget by ‖ΔV‖².
  const PrefillPlan pv = w.plan(Selection::sink_v);
  KvCache kv = w.model->new_kv_cache(w.prompt.n_tokens());
  Workspace ws;
  const PrefillResult r = prefill_prompt(*w.model, w.prompt, pv, kv, ws);
  const std::set<int32_t> after(r.stats.kept_after_check[0].begin(), r.stats.kept_after_check[0].end());
  int64_t sinks = 0, kept_candidates = 0;
  for (int32_t row : after) {
    if (pv.candidate[size_t(row)]) ++kept_candidates;
    else if (pv.reused[size_t(row)]) ++sinks;
  }
  CHECK(sinks == pv.n_forced);
  CHECK(size_t(kept_candidates) == pv.checks[0].keep);
}

TEST_CASE("selection: random keeps as many candidates, reproducibly from the seed") {
  const World& w = world();
  const PrefillPlan p = w.plan(Selection::random);
  const std::set<int32_t> a = kept(w, p), b = kept(w, p);
  CHECK(a == b);
  CHECK(a.size() == p.checks[0].keep);
  PrefillPlan other = p;
  other.blend.seed = 7;
  CHECK(kept(w, other) != a);
}

TEST_CASE("selection: prophet recomputes its pre-selected candidates over the first pass's KV") {
  const World& w = world();
  // Every candidate selected: the second pass recomputes all of them over the KV the first,
  // reuse pass installed, which must give full recompute's logits.
  const PrefillPlan all = w.plan(Selection::prophet, 1.0);
  REQUIRE(all.pre_select);
  CHECK(all.checks.empty());
  CHECK(all.pre_keep == size_t(all.n_candidates));
  KvCache kv = w.model->new_kv_cache(w.prompt.n_tokens()), kv_full = w.model->new_kv_cache(w.prompt.n_tokens());
  Workspace ws;
  const PrefillResult r = prefill_prompt(*w.model, w.prompt, all, kv, ws);
  const CacheKeys keys(*w.model, *w.format);
  const PrefillPlan full = plan_prefill(w.prompt, ReuseMode::full, BlendParams{}, w.model->config().n_layer, {});
  const PrefillResult f = prefill_prompt(*w.model, w.prompt, full, kv_full, ws);
  REQUIRE(r.logits.size() == f.logits.size());
  float diff = 0;
  for (size_t i = 0; i < f.logits.size(); ++i) diff = std::max(diff, std::fabs(r.logits[i] - f.logits[i]));
  CHECK(diff < 1e-3f);
  CHECK(r.stats.recomputed_reused_token_layers == all.n_candidates * w.model->config().n_layer);

  // A part: exactly pre_keep candidates, every layer, and nothing else of the reused tokens.
  const PrefillPlan part = w.plan(Selection::prophet, 0.3);
  const PrefillResult pr = prefill_prompt(*w.model, w.prompt, part, kv, ws);
  REQUIRE(pr.stats.kept_after_check.size() == 1);
  size_t chosen = 0;
  for (int32_t row : pr.stats.kept_after_check[0]) chosen += part.candidate[size_t(row)];
  CHECK(chosen == part.pre_keep);
  CHECK(pr.stats.recomputed_reused_token_layers == int64_t(part.pre_keep) * w.model->config().n_layer);
}

TEST_CASE("selection: prophet keeps the candidates the question attends to most over the reuse pass's KV, all layers") {
  // The reference, computed here independently of the fusor's passes and ranking: the reuse
  // prefill's KV (the cached rows installed, the rows without a cache computed over them: what
  // prophet's first pass leaves), then the uncached rows stepped through every layer by hand over
  // that KV, the question's queries' attention probabilities summed over its rows, heads and
  // layers for each key.
  const World& w = world();
  const ModelConfig& c = w.model->config();
  Backend& b = *w.backend;
  const int64_t n = w.prompt.n_tokens(), qb = w.prompt.segments.back().begin;
  const CacheKeys keys(*w.model, *w.format);
  const PrefillPlan reuse = plan_prefill(w.prompt, ReuseMode::reuse, BlendParams{}, c.n_layer, tier_lookup(keys, w.tiers.get()));
  KvCache kv = w.model->new_kv_cache(n);
  Workspace ws;
  prefill_prompt(*w.model, w.prompt, reuse, kv, ws);
  std::vector<int32_t> base, ids;
  for (int32_t row = 0; row < int32_t(n); ++row)
    if (!reuse.reused[size_t(row)]) {
      base.push_back(row);
      ids.push_back(w.prompt.ids[size_t(row)]);
    }
  const int64_t nb = int64_t(base.size());
  const int64_t first_q = std::find(base.begin(), base.end(), int32_t(qb)) - base.begin(), nq = nb - first_q;
  REQUIRE(nq == n - qb);
  std::vector<double> score(size_t(n), 0.0);
  w.model->embed(ids, ws);
  Tensor out = b.alloc(DType::f32, nq, c.q_dim());
  for (int l = 0; l < c.n_layer; ++l) {
    w.model->layer_qkv(l, nb, base, ws);
    SegmentMass mass;
    std::vector<float> per;
    mass.seg_begin.resize(size_t(n) + 1);
    std::iota(mass.seg_begin.begin(), mass.seg_begin.end(), int64_t(0));
    mass.out = &per;
    b.attention(ws.q.slice_rows(first_q, nq), std::span(base).subspan(size_t(first_q)), kv.k[l], kv.v[l], kv.pos, n,
                c.attention(l), out, &mass);
    for (int64_t qh = 0; qh < nq * c.n_head; ++qh)
      for (int64_t j = 0; j < n; ++j) score[size_t(j)] += per[size_t(qh * n + j)];
    w.model->layer_attend_ffn(l, nb, base, kv, n, ws);
  }
  const PrefillPlan p = w.plan(Selection::prophet, 0.3);
  REQUIRE(p.pre_select);
  check_top(p, kept(w, p), score, p.pre_keep);
  // and not what the question method keeps on its one check layer (else the test could not tell)
  CHECK(kept(w, p) != kept(w, w.plan(Selection::question, 0.3)));
}
