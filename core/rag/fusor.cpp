// Executes a prefill plan: dense groups through Model::forward, or the layer loop over the active
// rows with cached KV installed layer by layer and the HKVD selection on the check layers.
#include "core/rag/fusor.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include "core/format/checksum.h"
#include "core/kv/layer-loader.h"
#include "core/model/generate.h"
#include "core/rag/focused-chunks.h"
#include "core/rag/selection.h"
#include "core/util/error.h"

namespace ragkv {

using Clock = std::chrono::steady_clock;

double PrefillStats::compute_fraction() const {
  const double total = double(prompt_tokens) * n_layer;
  return total > 0 ? double(computed_token_layers) / total : 0.0;
}

double PrefillStats::reused_recompute_fraction() const {
  const double total = double(reused_tokens) * n_layer;
  return total > 0 ? double(recomputed_reused_token_layers) / total : 0.0;
}

namespace {

// Installs layer l of a set of cached segments into the prompt's KV rows at their positions, one
// layer at a time and in order. Device-tier KV is copied on the backend's queue; disk- and
// host-tier KV comes through a LayerKvLoader and is uploaded with upload_async (on CUDA a copy
// queue beside compute) one layer ahead: layer l + 1 is queued while the caller computes layer l
// (CacheBlend §5), and rotated once the compute queue has waited for it. K is rotated from the
// position it was computed at to its new one: R(p_new)·k = R(Δ)·R(p_old)·k (Cache-Craft §4,
// CacheBlend §3.2).
class CachedKvInstaller {
 public:
  CachedKvInstaller(const Model& model, const PrefillPlan& plan, const std::vector<size_t>& segments)
      : model_(model), plan_(plan) {
    std::vector<const SegmentKv*> jobs;
    for (size_t s : segments) {
      if (plan.segments[s].kv->tier() == KvTier::device) {
        device_.push_back(s);
      } else {
        jobs.push_back(plan.segments[s].kv.get());
        host_side_.push_back(s);
      }
    }
    if (!jobs.empty()) loader_.emplace(std::move(jobs), model.config().n_layer, plan.blend.preload_depth);
    plan_rotations(segments);
  }

  void install_layer(int l, KvCache& kv) {
    Backend& b = model_.backend();
    for (size_t s : device_) {
      const int64_t begin = plan_.segments[s].begin, n = plan_.segments[s].n_tokens;
      b.copy(*plan_.segments[s].kv->device_k(l), kv.k[l].slice_rows(begin, n));
      b.copy(*plan_.segments[s].kv->device_v(l), kv.v[l].slice_rows(begin, n));
    }
    if (loader_) {
      if (l == 0) upload(0, kv);
      b.wait_uploads();
    }
    rotate(l, kv);
    if (loader_ && l + 1 < model_.config().n_layer) upload(l + 1, kv);
  }

  double load_ms() const { return loader_ ? loader_->load_ms() : 0.0; }
  double wait_ms() const { return loader_ ? loader_->wait_ms() : 0.0; }

 private:
  void upload(int l, KvCache& kv) {
    try {
      loader_->wait_layer(l);
    } catch (ChunkLoadFailed& e) {
      throw ChunkLoadFailed(host_side_[e.job], e.what());
    }
    Backend& b = model_.backend();
    for (size_t j = 0; j < host_side_.size(); ++j) {
      const SegmentPlan& seg = plan_.segments[host_side_[j]];
      const HostKvLayer layer = loader_->layer(j, l);
      b.upload_async(kv.k[l].slice_rows(seg.begin, seg.n_tokens), layer.k);
      b.upload_async(kv.v[l].slice_rows(seg.begin, seg.n_tokens), layer.v);
    }
    loader_->release_layer(l);  // upload_async copies or stages the host data before returning
  }

  // The cached segments that moved (Δ ≠ 0), adjacent ones merged into one run of rows with each
  // row's own Δ: one rope call per run and layer instead of one per segment (a RAG prompt's
  // chunks lie side by side: one call, and on the GPU one launch and one upload, for all of
  // them). Each row is rotated exactly as alone (rope is per row).
  void plan_rotations(const std::vector<size_t>& segments) {
    std::vector<size_t> moved;
    for (size_t s : segments)
      if (plan_.segments[s].begin != plan_.segments[s].kv->meta().first_pos) moved.push_back(s);
    std::sort(moved.begin(), moved.end(),
              [&](size_t a, size_t b) { return plan_.segments[a].begin < plan_.segments[b].begin; });
    for (size_t s : moved) {
      const SegmentPlan& seg = plan_.segments[s];
      const int32_t delta = int32_t(seg.begin - seg.kv->meta().first_pos);
      if (runs_.empty() || runs_.back().begin + int64_t(runs_.back().deltas.size()) != seg.begin)
        runs_.push_back({seg.begin, {}});
      runs_.back().deltas.insert(runs_.back().deltas.end(), size_t(seg.n_tokens), delta);
    }
  }

  void rotate(int l, KvCache& kv) {
    const ModelConfig& c = model_.config();
    for (const RotationRun& run : runs_)
      model_.backend().rope(kv.k[l].slice_rows(run.begin, int64_t(run.deltas.size())), run.deltas, c.n_head_kv,
                            c.head_dim, c.rope(l), /*inverse=*/false);
  }

  struct RotationRun {
    int64_t begin = 0;            // the run's first row
    std::vector<int32_t> deltas;  // per row: its segment's Δ = new position − computed position
  };

  const Model& model_;
  const PrefillPlan& plan_;
  std::vector<size_t> device_, host_side_;
  std::vector<RotationRun> runs_;
  std::optional<LayerKvLoader> loader_;
};

PrefillResult prefill_dense(const Model& model, const RagPrompt& prompt, const PrefillPlan& plan, KvCache& kv,
                            Workspace& ws) {
  const ModelConfig& c = model.config();
  PrefillResult r;
  r.stats.row_layers.assign(size_t(plan.n_tokens), 0);
  kv.n_used = 0;
  const auto& groups = plan.dense_groups;
  if (plan.loaded_groups > 0) {
    const size_t last = groups[plan.loaded_groups - 1].second;
    const auto t0 = Clock::now();
    CachedKvInstaller installer(model, plan, plan.cached_segments(0, last));
    for (int l = 0; l < c.n_layer; ++l) installer.install_layer(l, kv);
    const int64_t end = plan.segments[last - 1].end();
    for (int64_t i = 0; i < end; ++i) kv.pos[i] = int32_t(i);
    kv.n_used = end;
    r.stats.reused_tokens = end;
    model.backend().synchronize();
    r.stats.load_ms = r.stats.load_wait_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  for (size_t g = plan.loaded_groups; g < groups.size(); ++g) {
    const int64_t first = prompt.segments[groups[g].first].begin;
    const int64_t last = prompt.segments[groups[g].second - 1].end();
    r.logits = model.forward(std::span(prompt.ids).subspan(first, last - first), kv, ws);
    r.stats.computed_token_layers += (last - first) * c.n_layer;
    for (int64_t i = first; i < last; ++i) {
      r.stats.row_layers[size_t(i)] += c.n_layer;
      r.stats.final_rows.push_back(int32_t(i));
    }
  }
  return r;
}

// Whether prophet's first pass reads the question's attention on layer l: every layer that sees the
// whole prompt. A sliding-window layer (Gemma 3's local layers) shows the question only its last
// window, so its mass lands on the last chunk whatever the question asks; measured on Gemma 3, the
// global layers alone rank better (bench/results, issue 12).
bool relevance_layer(const ModelConfig& c, int l) {
  const bool any_global = std::find(c.layer_is_local.begin(), c.layer_is_local.end(), false) != c.layer_is_local.end();
  const bool local = c.sliding_window > 0 && size_t(l) < c.layer_is_local.size() && c.layer_is_local[size_t(l)];
  return !local || !any_global;
}

// Replaces the first rows of t by rows idx of it (idx ascending), through scratch of t's shape.
void compact_rows(Backend& b, Tensor& t, Tensor& scratch, int64_t n, const std::vector<int32_t>& idx) {
  b.gather_rows(t.slice_rows(0, n), scratch.slice_rows(0, int64_t(idx.size())), idx);
  std::swap(t, scratch);
}

PrefillResult prefill_sparse(const Model& model, const RagPrompt& prompt, const PrefillPlan& plan, KvCache& kv,
                             Workspace& ws, VariantStatsAccumulator* collect) {
  const ModelConfig& c = model.config();
  Backend& b = model.backend();
  const int64_t n = plan.n_tokens;
  PrefillResult r;
  r.stats.row_layers.assign(size_t(n), 0);
  r.stats.reused_tokens = plan.reused_tokens();
  for (int64_t i = 0; i < n; ++i) kv.pos[i] = int32_t(i);
  CachedKvInstaller installer(model, plan, plan.cached_segments());
  Tensor scratch_x, scratch_q;

  const int64_t question_begin = prompt.segments.back().begin;
  // craft: Algorithm 1 over the chunks (Cache-Craft §3.2.2), fed the question's attention per chunk
  // on every layer that sees the whole prompt (relevance_layer), when there are chunks to split.
  std::vector<size_t> chunk_segments;
  for (size_t s = 0; s < prompt.segments.size(); ++s)
    if (prompt.segments[s].kind == PromptSegment::Kind::chunk) chunk_segments.push_back(s);
  std::optional<FocusDetector> focus;
  if (plan.mode == ReuseMode::craft && plan.craft.focus_window > 0 && chunk_segments.size() >= 3 && plan.n_forced > 0 &&
      !plan.pre_select)
    focus.emplace(chunk_segments.size(), plan.craft.focus_window);
  const uint64_t seed = plan.blend.seed ^ checksum64(prompt.ids.data(), prompt.ids.size() * sizeof(int32_t));
  const Selection sel = plan.blend.selection;

  // One pass of the layer loop over `active`: cached layers installed first when `install` (the
  // first pass), blend's check layers when `checks`, and the question's attention over each
  // layer's KV added to `relevance` when given. Returns the rows active at the end.
  SegmentMass seg_mass;  // write-back: the mass of the active rows per prompt segment
  std::vector<float> seg_mass_out;
  if (collect) {
    for (const PromptSegment& s : prompt.segments) seg_mass.seg_begin.push_back(s.begin);
    seg_mass.seg_begin.push_back(n);
    seg_mass.out = &seg_mass_out;
  }
  auto pass = [&](std::vector<int32_t> active, bool install, bool checks, std::vector<double>* relevance,
                  bool final_pass) {
    // The question's attention per relevance layer, filled by the backend's synchronize() after
    // the pass (one wait for the device, not one per layer) and added up then, in layer order.
    std::vector<std::vector<float>> layer_mass(relevance ? size_t(c.n_layer) : 0);
    struct Flush {  // leaving by an exception: no copy may land in layer_mass after it is gone
      Backend& b;
      bool armed;
      ~Flush() {
        if (!armed) return;
        try {
          b.synchronize();
        } catch (const std::exception&) {
        }
      }
    } flush{b, relevance != nullptr};
    std::vector<int32_t> ids(active.size());
    for (size_t i = 0; i < active.size(); ++i) ids[i] = prompt.ids[active[i]];
    model.embed(ids, ws);
    if (scratch_x.rows < ws.rows) {
      scratch_x = b.alloc(DType::f32, ws.rows, c.n_embd);
      scratch_q = b.alloc(DType::f32, ws.rows, c.q_dim());
    }
    size_t next_check = 0;
    for (int l = 0; l < c.n_layer; ++l) {
      if (install) installer.install_layer(l, kv);  // before any recomputed row is scattered over the cached ones
      const int64_t na = int64_t(active.size());
      model.layer_qkv(l, na, active, ws);
      r.stats.computed_token_layers += na;
      for (int32_t row : active) {
        r.stats.recomputed_reused_token_layers += plan.reused[size_t(row)];
        ++r.stats.row_layers[size_t(row)];
      }

      // On a check layer, score the active rows (deviation against the cache must be read before
      // the scatter, the question's attention after it) and keep the best candidates
      // (CacheBlend §4.3 gradual filtering; the methods are in core/rag/selection.h).
      const bool check = checks && next_check < plan.checks.size() && plan.checks[next_check].layer == l;
      const CheckLayerState st{model, l, active, ws, kv, n, question_begin};
      std::vector<float> deviation;
      if (check) deviation = deviation_scores(sel, st, plan.candidate);
      b.scatter_kv_rows(ws.k.slice_rows(0, na), ws.v.slice_rows(0, na), kv.k[l], kv.v[l], active);
      if (focus && !focus->decided() && relevance_layer(c, l)) {
        const std::vector<float> mass = question_attention(st);
        std::vector<double> inter(chunk_segments.size(), 0.0);  // inter_l(C_i, U)
        for (size_t i = 0; i < chunk_segments.size(); ++i) {
          const PromptSegment& seg = prompt.segments[chunk_segments[i]];
          for (int64_t j = seg.begin; j < seg.end(); ++j) inter[i] += mass[size_t(j)];
        }
        if (focus->add_layer(l, inter)) {
          // L* = l: from the next layer on, the unfocused chunks keep their cached KV.
          r.stats.focus_cutoff_layer = l;
          std::vector<uint8_t> drop(static_cast<size_t>(n), 0);
          std::vector<uint8_t> focused(chunk_segments.size(), 0);
          for (size_t i : focus->focused()) {
            focused[i] = 1;
            r.stats.focused_chunks.push_back(int32_t(i));
          }
          for (size_t i = 0; i < chunk_segments.size(); ++i) {
            const SegmentPlan& sp = plan.segments[chunk_segments[i]];
            if (!focused[i] && sp.kv) std::fill(drop.begin() + sp.begin, drop.begin() + sp.end(), uint8_t(1));
          }
          std::vector<int32_t> keep;
          for (size_t i = 0; i < active.size(); ++i)
            if (!drop[size_t(active[i])]) keep.push_back(int32_t(i));
          if (int64_t(keep.size()) < na) {
            compact_rows(b, ws.x, scratch_x, na, keep);
            compact_rows(b, ws.q, scratch_q, na, keep);
            std::vector<int32_t> next(keep.size());
            for (size_t i = 0; i < keep.size(); ++i) next[i] = active[keep[i]];
            active = std::move(next);
          }
        }
      }
      if (check) {
        std::vector<float> question = question_scores(sel, st);
        const std::vector<float> score =
            selection_scores(sel, st, plan.candidate, std::move(deviation), std::move(question), seed);
        const size_t k = adaptive_keep(active, plan.candidate, score, plan.checks[next_check].keep, plan.blend.adaptive_mass);
        const std::vector<int32_t> keep = select_hkvd_rows(active, plan.candidate, score, k);
        ++next_check;
        if (int64_t(keep.size()) < na) {
          compact_rows(b, ws.x, scratch_x, na, keep);
          compact_rows(b, ws.q, scratch_q, na, keep);
          std::vector<int32_t> next(keep.size());
          for (size_t i = 0; i < keep.size(); ++i) next[i] = active[keep[i]];
          active = std::move(next);
        }
        r.stats.kept_after_check.push_back(active);
      }
      const bool stats = collect && final_pass;
      SegmentMass* attend_mass = stats ? &seg_mass : nullptr;
      SegmentMass question_mass;
      if (relevance && relevance_layer(c, l)) {
        // The question's attention comes with the layer's own (the first pass neither checks nor
        // narrows its rows, so they are those the totals are asked of).
        if (stats || check || focus) fail("internal: the question's attention asked of a pass that changes its rows");
        question_mass = question_attention_request(st, layer_mass[size_t(l)]);
        attend_mass = &question_mass;
      }
      model.layer_attend_ffn(l, int64_t(active.size()), active, kv, n, ws, attend_mass);
      if (stats) {
        collect->add_rows(active, seg_mass_out);
        collect->end_layer();
      }
    }
    if (relevance) {
      b.synchronize();
      flush.armed = false;
      for (const std::vector<float>& mass : layer_mass)
        for (size_t j = 0; j < mass.size(); ++j) (*relevance)[j] += mass[j];
    }
    return active;
  };

  std::vector<int32_t> active;
  if (plan.pre_select) {
    // Two stages (ProphetKV's idea: choose by relevance to the question, measured first): a reuse
    // pass computes only the rows without a cache, and the question's queries' attention over
    // the stale KV, summed over every layer and head, ranks the candidates; then the best are
    // recomputed from layer 0 over the KV the first pass installed.
    std::vector<int32_t> base;  // the rows without a cache (auto's craft-fixed rows wait for the second pass)
    for (int32_t row : plan.active)
      if (!plan.reused[size_t(row)]) base.push_back(row);
    std::vector<double> relevance(static_cast<size_t>(n), 0.0);
    pass(base, true, false, &relevance, false);
    if (!base.empty() && base.back() == n - 1) {  // the last prompt row: the unrepaired prompt's first step
      const std::vector<float> first = model.logits(int64_t(base.size()) - 1, 1, ws);
      r.stats.first_pass_token = argmax(first);
      r.stats.first_pass_margin = top2_probability_gap(first);
    }
    // The first pass computed every uncached row once; the second computes none of them again in
    // full. Rows before the first segment reused at another position or context saw no stale KV:
    // they are exact and stay as they are. The uncached rows after it (a conversation's new turn,
    // a chunk that missed) attended stale KV like any reused row: they join the candidates, with
    // the plan's share of them recomputed. Only the question's rows are computed again, for the
    // logits. (Write-back, whose variant statistics read every computed row's attention in the
    // final pass, computes them again as before.)
    int64_t first_stale = n;
    for (const SegmentPlan& sp : plan.segments)
      if (sp.kv && !sp.exact()) {
        first_stale = sp.begin;
        break;
      }
    std::vector<int32_t> rows;
    std::vector<uint8_t> candidate = plan.candidate;
    size_t joined = 0;
    for (int32_t row : plan.active) {
      if (plan.reused[size_t(row)] || row >= question_begin || collect) {
        rows.push_back(row);
      } else if (row > first_stale) {
        rows.push_back(row);
        candidate[size_t(row)] = 1;
        ++joined;
      }
    }
    const double share = plan.n_candidates > 0 ? double(plan.pre_keep) / double(plan.n_candidates) : 0.0;
    const size_t keep = plan.pre_keep + size_t(std::llround(share * double(joined)));
    std::vector<float> score(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) score[i] = float(relevance[size_t(rows[i])]);
    std::vector<int32_t> second;
    const size_t k = adaptive_keep(rows, candidate, score, keep, plan.blend.adaptive_mass);
    for (int32_t i : select_hkvd_rows(rows, candidate, score, k)) second.push_back(rows[size_t(i)]);
    r.stats.kept_after_check.push_back(second);
    active = pass(second, false, false, nullptr, true);
  } else {
    active = pass(plan.active, true, true, nullptr, true);
  }
  kv.n_used = n;
  r.stats.final_rows = active;
  r.logits = model.logits(int64_t(active.size()) - 1, 1, ws);  // the last prompt token is always active
  r.stats.load_ms = installer.load_ms();
  r.stats.load_wait_ms = installer.wait_ms();
  return r;
}

}  // namespace

PrefillResult prefill_prompt(const Model& model, const RagPrompt& prompt, const PrefillPlan& plan, KvCache& kv,
                             Workspace& ws, VariantStatsAccumulator* collect) {
  if (plan.segments.size() != prompt.segments.size() || plan.n_tokens != prompt.n_tokens())
    fail("internal: a plan of {} segments / {} tokens for a prompt of {} / {}", plan.segments.size(), plan.n_tokens,
         prompt.segments.size(), prompt.n_tokens());
  if (kv.n_ctx < prompt.n_tokens()) fail("internal: KV capacity {} < prompt {}", kv.n_ctx, prompt.n_tokens());
  const auto t0 = Clock::now();
  PrefillResult r =
      plan.sparse() ? prefill_sparse(model, prompt, plan, kv, ws, collect) : prefill_dense(model, prompt, plan, kv, ws);
  model.backend().synchronize();
  r.stats.prompt_tokens = prompt.n_tokens();
  r.stats.n_layer = model.config().n_layer;
  r.stats.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return r;
}

}  // namespace ragkv
