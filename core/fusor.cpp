// Prefill per reuse mode. The dense modes (full, prefix) run Model::forward over the same
// segment groups — [prefix], [chunk 1], [chunks 2.. + question] — which is how `precompute`
// computes caches, so a reused exact prefix is bit-identical to a recomputed one (DESIGN.md §4).
// The sparse modes (reuse, blend) step the layer loop over the active rows only.
#include "core/fusor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/kv-loader.h"

namespace ragkv {

using Clock = std::chrono::steady_clock;

const char* reuse_mode_name(ReuseMode m) {
  switch (m) {
    case ReuseMode::full: return "full";
    case ReuseMode::prefix: return "prefix";
    case ReuseMode::reuse: return "reuse";
    case ReuseMode::blend: return "blend";
  }
  return "?";
}

ReuseMode parse_reuse_mode(const std::string& s) {
  for (ReuseMode m : {ReuseMode::full, ReuseMode::prefix, ReuseMode::reuse, ReuseMode::blend})
    if (s == reuse_mode_name(m)) return m;
  fail("unknown mode '{}' (expected full, prefix, reuse or blend)", s);
}

bool SegmentSource::exact() const { return cache && cache->meta().first_pos == begin; }

double PrefillStats::recompute_fraction() const {
  const double total = double(prompt_tokens) * n_layer;
  return total > 0 ? double(computed_token_layers) / total : 0.0;
}

// CacheBlend §4.3: "pick r_1 % … with r_1 slightly higher than r … r_2 slightly less than r_1".
// The i-th of c check layers keeps r·(1 + (c − 1 − i)/c): for c = 3, 1.67r, 1.33r, r.
std::vector<double> gradual_filter_fractions(double r, int checks) {
  std::vector<double> f;
  for (int i = 0; i < checks; ++i) f.push_back(std::min(1.0, r * (1.0 + double(checks - 1 - i) / checks)));
  return f;
}

std::vector<int32_t> top_k_indices(const std::vector<float>& values, size_t keep) {
  std::vector<int32_t> idx(values.size());
  std::iota(idx.begin(), idx.end(), 0);
  keep = std::min(keep, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + keep, idx.end(), [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  idx.resize(keep);
  std::sort(idx.begin(), idx.end());
  return idx;
}

namespace {

// Layer l of a cached segment, in two steps so the copy can overlap compute (CacheBlend §5): the
// K/V rows go into the prompt's rows with upload_async (on CUDA a copy queue beside compute),
// then, once the compute queue waits for them, K is rotated from the position it was computed at
// to its new one: R(p_new)·k = R(Δ)·R(p_old)·k (Cache-Craft §4, CacheBlend §3.2).
void upload_cached_layer(const Model& model, int l, const PromptSegment& seg, const uint16_t* k,
                         const uint16_t* v, KvCache& kv) {
  Backend& b = model.backend();
  const int64_t n = int64_t(seg.ids.size());
  b.upload_async(kv.k[l].slice_rows(seg.begin, n), k);
  b.upload_async(kv.v[l].slice_rows(seg.begin, n), v);
}

void rotate_cached_layer(const Model& model, int l, const PromptSegment& seg, const SegmentSource& src, KvCache& kv) {
  const ModelConfig& c = model.config();
  const int64_t n = int64_t(seg.ids.size());
  const int32_t delta = int32_t(seg.begin - src.cache->meta().first_pos);
  if (delta != 0) {
    const std::vector<int32_t> d(static_cast<size_t>(n), delta);
    model.backend().rope(kv.k[l].slice_rows(seg.begin, n), d, c.n_head_kv, c.head_dim, c.rope(l), /*inverse=*/false);
  }
}

void install_cached_layer(const Model& model, int l, const PromptSegment& seg, const SegmentSource& src,
                          const uint16_t* k, const uint16_t* v, KvCache& kv) {
  upload_cached_layer(model, l, seg, k, v, kv);
  model.backend().wait_uploads();
  rotate_cached_layer(model, l, seg, src, kv);
}

// Layer l of a segment whose KV is resident in backend memory: a copy queued with the compute,
// then the same rotation.
void copy_resident_layer(const Model& model, int l, const PromptSegment& seg, const SegmentSource& src, KvCache& kv) {
  const int64_t n = int64_t(seg.ids.size());
  model.backend().copy(src.resident->k[size_t(l)], kv.k[l].slice_rows(seg.begin, n));
  model.backend().copy(src.resident->v[size_t(l)], kv.v[l].slice_rows(seg.begin, n));
  rotate_cached_layer(model, l, seg, src, kv);
}

// Groups of segments computed by one Model::forward call each, in `full` and `prefix`.
std::vector<std::pair<size_t, size_t>> dense_groups(const RagPrompt& p) {
  const size_t n = p.segments.size();
  std::vector<std::pair<size_t, size_t>> g;
  g.push_back({0, 1});
  if (n > 2) g.push_back({1, 2});
  g.push_back({g.back().second, n});
  return g;
}

PrefillResult prefill_dense(const Model& model, const RagPrompt& prompt, std::vector<SegmentSource>& sources,
                            bool reuse_prefix, KvCache& kv, Workspace& ws) {
  const ModelConfig& c = model.config();
  Backend& b = model.backend();
  PrefillResult r;
  r.stats.prompt_tokens = prompt.n_tokens();
  r.stats.n_layer = c.n_layer;
  kv.n_used = 0;
  const auto groups = dense_groups(prompt);
  size_t g = 0;
  if (reuse_prefix) {
    // Leading groups whose segments all have exact caches are loaded, not computed.
    const auto t0 = Clock::now();
    for (; g < groups.size(); ++g) {
      bool all = true;
      for (size_t s = groups[g].first; s < groups[g].second; ++s) all = all && sources[s].exact();
      if (!all || groups[g].second == prompt.segments.size()) break;  // the question is always computed
      for (size_t s = groups[g].first; s < groups[g].second; ++s) {
        const PromptSegment& seg = prompt.segments[s];
        const ChunkKvReader& rd = *sources[s].cache;
        std::vector<uint16_t> buf(sources[s].resident ? 0 : rd.layer_bytes() / sizeof(uint16_t));
        for (int l = 0; l < c.n_layer; ++l) {
          if (sources[s].resident) {
            copy_resident_layer(model, l, seg, sources[s], kv);
            continue;
          }
          try {
            rd.read_layer(l, buf.data(), buf.data() + buf.size() / 2);
          } catch (const std::exception& e) {
            throw ChunkLoadFailed(s, e.what());
          }
          install_cached_layer(model, l, seg, sources[s], buf.data(), buf.data() + buf.size() / 2, kv);
        }
        for (int64_t i = seg.begin; i < seg.end(); ++i) kv.pos[i] = int32_t(i);
        kv.n_used = seg.end();
        r.stats.reused_tokens += int64_t(seg.ids.size());
      }
    }
    b.synchronize();
    r.stats.load_ms = r.stats.load_wait_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  for (; g < groups.size(); ++g) {
    const int64_t first = prompt.segments[groups[g].first].begin;
    const int64_t last = prompt.segments[groups[g].second - 1].end();
    r.logits = model.forward(std::span(prompt.ids).subspan(first, last - first), kv, ws);
    r.stats.computed_token_layers += (last - first) * c.n_layer;
  }
  return r;
}

// Replaces the first rows of t by rows idx of it (idx ascending), through scratch of t's shape.
void compact_rows(Backend& b, Tensor& t, Tensor& scratch, int64_t n, const std::vector<int32_t>& idx) {
  b.gather_rows(t.slice_rows(0, n), scratch.slice_rows(0, int64_t(idx.size())), idx);
  std::swap(t, scratch);
}

PrefillResult prefill_sparse(const Model& model, const RagPrompt& prompt, std::vector<SegmentSource>& sources,
                             bool recompute, const BlendParams& blend, KvCache& kv, Workspace& ws) {
  const ModelConfig& c = model.config();
  Backend& b = model.backend();
  const int64_t n = prompt.n_tokens();
  const int L = c.n_layer;
  PrefillResult r;
  r.stats.prompt_tokens = n;
  r.stats.n_layer = L;
  for (int64_t i = 0; i < n; ++i) kv.pos[i] = int32_t(i);

  // Rows computed on every layer (the question, chunks without a cache) and the HKVD candidates
  // (reused tokens at a new position; exact-prefix tokens are never recomputed).
  std::vector<uint8_t> candidate(static_cast<size_t>(n), 0);
  std::vector<int32_t> active;
  std::vector<const ChunkKvReader*> jobs;  // caches loaded from their files, layer by layer
  std::vector<size_t> job_seg, resident_seg;
  int64_t n_candidates = 0;
  for (size_t s = 0; s < prompt.segments.size(); ++s) {
    const PromptSegment& seg = prompt.segments[s];
    const SegmentSource& src = sources[s];
    if (src.cache) {
      r.stats.reused_tokens += int64_t(seg.ids.size());
      if (src.resident) {
        resident_seg.push_back(s);
      } else {
        jobs.push_back(&*src.cache);
        job_seg.push_back(s);
      }
    }
    for (int64_t i = seg.begin; i < seg.end(); ++i) {
      if (src.cache && !src.exact()) {
        candidate[i] = 1;
        ++n_candidates;
        if (recompute) active.push_back(int32_t(i));
      } else if (!src.cache) {
        active.push_back(int32_t(i));
      }
    }
  }
  const int checks = recompute ? std::clamp(blend.check_layers, 1, std::max(1, L - 1)) : 0;
  const std::vector<double> keep_fraction = gradual_filter_fractions(blend.recompute_ratio, checks);

  std::optional<LayerKvLoader> loader;
  if (!jobs.empty()) loader.emplace(jobs, L, blend.preload_depth);

  std::vector<int32_t> ids(active.size());
  for (size_t i = 0; i < active.size(); ++i) ids[i] = prompt.ids[active[i]];
  model.embed(ids, ws);
  Tensor scratch_x = b.alloc(DType::f32, ws.rows, c.n_embd), scratch_q = b.alloc(DType::f32, ws.rows, c.q_dim());
  Tensor dev_k = b.alloc(DType::f32, ws.rows, 1), dev_v = b.alloc(DType::f32, ws.rows, 1);

  // Layer l + 1's cached rows are uploaded while layer l computes (on CUDA the copy queue moves
  // them while the compute queue runs layer l), and rotated at the top of layer l + 1 once the
  // compute queue has waited for them — before any recomputed row is scattered over them.
  auto upload_layer = [&](int l) {
    try {
      loader->wait_layer(l);
    } catch (ChunkLoadFailed& e) {
      throw ChunkLoadFailed(job_seg[e.job], e.what());
    }
    for (size_t j = 0; j < jobs.size(); ++j)
      upload_cached_layer(model, l, prompt.segments[job_seg[j]], loader->k(j, l), loader->v(j, l), kv);
    loader->release_layer(l);  // upload_async copies or stages the host data before returning
  };
  if (loader) upload_layer(0);
  for (int l = 0; l < L; ++l) {
    for (size_t s : resident_seg) copy_resident_layer(model, l, prompt.segments[s], sources[s], kv);
    if (loader) {
      b.wait_uploads();
      for (size_t j = 0; j < jobs.size(); ++j) rotate_cached_layer(model, l, prompt.segments[job_seg[j]], sources[job_seg[j]], kv);
      if (l + 1 < L) upload_layer(l + 1);
    }
    const int64_t na = int64_t(active.size());
    model.layer_qkv(l, na, active, ws);
    r.stats.computed_token_layers += na;

    std::vector<int32_t> keep;  // indices into `active` that stay active from this layer's attention on
    if (checks > 0 && l >= 1 && l <= checks) {
      // KV deviation of every recomputed token against its cached K/V (CacheBlend §4.1), then
      // keep the HKVD tokens among the candidates (§4.3, gradual filtering).
      b.row_sq_dist(ws.k.slice_rows(0, na), kv.k[l], active, dev_k.slice_rows(0, na));
      b.row_sq_dist(ws.v.slice_rows(0, na), kv.v[l], active, dev_v.slice_rows(0, na));
      std::vector<float> dk(static_cast<size_t>(na)), dv(static_cast<size_t>(na));
      b.download(dev_k.slice_rows(0, na), dk.data());
      b.download(dev_v.slice_rows(0, na), dv.data());
      std::vector<float> dev;
      std::vector<int32_t> cand_idx;
      for (int64_t i = 0; i < na; ++i)
        if (candidate[active[i]]) {
          cand_idx.push_back(int32_t(i));
          dev.push_back(dk[i] + dv[i]);
        }
      const auto want = size_t(std::llround(keep_fraction[l - 1] * double(n_candidates)));
      for (int32_t t : top_k_indices(dev, want)) keep.push_back(cand_idx[t]);
      for (int64_t i = 0; i < na; ++i)
        if (!candidate[active[i]]) keep.push_back(int32_t(i));
      std::sort(keep.begin(), keep.end());
    }
    b.scatter_rows(ws.k.slice_rows(0, na), kv.k[l], active);
    b.scatter_rows(ws.v.slice_rows(0, na), kv.v[l], active);
    if (!keep.empty() && int64_t(keep.size()) < na) {
      compact_rows(b, ws.x, scratch_x, na, keep);
      compact_rows(b, ws.q, scratch_q, na, keep);
      std::vector<int32_t> next(keep.size());
      for (size_t i = 0; i < keep.size(); ++i) next[i] = active[keep[i]];
      active = std::move(next);
    }
    model.layer_attend_ffn(l, int64_t(active.size()), active, kv, n, ws);
  }
  kv.n_used = n;
  r.logits = model.logits(int64_t(active.size()) - 1, 1, ws);  // the last prompt token is always active
  if (loader) {
    r.stats.load_ms = loader->load_ms();
    r.stats.load_wait_ms = loader->wait_ms();
  }
  return r;
}

}  // namespace

PrefillResult prefill_prompt(const Model& model, const RagPrompt& prompt, std::vector<SegmentSource>& sources,
                             ReuseMode mode, const BlendParams& blend, KvCache& kv, Workspace& ws) {
  if (sources.size() != prompt.segments.size())
    fail("internal: {} segment sources for {} segments", sources.size(), prompt.segments.size());
  if (prompt.segments.back().kind != PromptSegment::Kind::suffix || prompt.segments.back().ids.empty())
    fail("internal: a RAG prompt must end with a non-empty question segment");
  if (kv.n_ctx < prompt.n_tokens()) fail("internal: KV capacity {} < prompt {}", kv.n_ctx, prompt.n_tokens());
  for (size_t s = 0; s < sources.size(); ++s) sources[s].begin = prompt.segments[s].begin;
  const auto t0 = Clock::now();
  PrefillResult r;
  switch (mode) {
    case ReuseMode::full: r = prefill_dense(model, prompt, sources, false, kv, ws); break;
    case ReuseMode::prefix: r = prefill_dense(model, prompt, sources, true, kv, ws); break;
    case ReuseMode::reuse: r = prefill_sparse(model, prompt, sources, false, blend, kv, ws); break;
    case ReuseMode::blend: r = prefill_sparse(model, prompt, sources, true, blend, kv, ws); break;
  }
  model.backend().synchronize();
  r.stats.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return r;
}

}  // namespace ragkv
