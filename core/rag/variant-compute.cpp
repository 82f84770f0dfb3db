// Variants computed in context with their Cache-Craft metadata measured on the way.
#include "core/rag/variant-compute.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <numeric>
#include <set>
#include <string>

#include "core/kv/claim-set.h"
#include "core/kv/claimed-work.h"
#include "core/kv/variant-ledger.h"
#include "core/rag/cache-keys.h"
#include "core/rag/variant-choice.h"
#include "retrieval/chunker.h"
#include "core/util/error.h"

namespace ragkv {

VariantStatsAccumulator::VariantStatsAccumulator(std::vector<int64_t> chunk_begin, std::vector<int64_t> chunk_end,
                                                 int n_head, size_t n_seg)
    : begin_(std::move(chunk_begin)), end_(std::move(chunk_end)), n_head_(n_head),
      n_seg_(n_seg > 0 ? n_seg : begin_.size() + 1) {
  const size_t k = begin_.size();
  if (k == 0 || end_.size() != k || n_seg_ < k + 1)
    fail("internal: variant stats of {} / {} chunk bounds over {} segments", k, end_.size(), n_seg_);
  inter_layer_.assign(k, {});
  inter_sum_.assign(k, {});
  for (size_t i = 0; i < k; ++i) {
    inter_layer_[i].assign(i, 0.0);
    inter_sum_[i].assign(i, 0.0);
  }
  intra_layer_.assign(k, 0.0);
  a_sum_.assign(k, 0.0);
  b_sum_.assign(k, 0.0);
  token_inter_.assign(size_t(end_.back()), 0.0);
}

void VariantStatsAccumulator::add(int64_t first_row, int64_t n_rows, const std::vector<float>& mass) {
  std::vector<int32_t> rows(static_cast<size_t>(n_rows));
  std::iota(rows.begin(), rows.end(), int32_t(first_row));
  add_rows(rows, mass);
}

void VariantStatsAccumulator::add_rows(std::span<const int32_t> rows, const std::vector<float>& mass) {
  const size_t k = begin_.size(), n_seg = n_seg_;
  if (mass.size() != rows.size() * size_t(n_head_) * n_seg)
    fail("internal: segment mass of {} values for {} rows x {} heads x {} segments", mass.size(), rows.size(), n_head_,
         n_seg);
  std::vector<double> m(k + 1);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t row = rows[r];
    // The chunk holding the row (rows before chunk 0 are the prefix's).
    const auto it = std::upper_bound(begin_.begin(), begin_.end(), row);
    if (it == begin_.begin()) continue;
    const size_t i = size_t(it - begin_.begin()) - 1;
    if (row >= end_[i]) continue;
    std::fill(m.begin(), m.end(), 0.0);
    for (int h = 0; h < n_head_; ++h)
      for (size_t s = 0; s <= k; ++s) m[s] += mass[(r * size_t(n_head_) + size_t(h)) * n_seg + s];
    for (double& x : m) x /= n_head_;  // a probability: the head mean
    double outside = 0;
    for (size_t j = 0; j < i; ++j) {
      inter_layer_[i][j] += m[1 + j];  // Eq. 3: inter(C_j, C_i), queries of C_i on keys of C_j
      outside += m[1 + j];
    }
    intra_layer_[i] += m[1 + i];  // Eq. 4 (the diagonal included)
    token_inter_[size_t(row)] += outside;  // Eq. 14's Σ_j inter(C_j, t_k), over layers
  }
}

void VariantStatsAccumulator::end_layer() {
  for (size_t i = 0; i < begin_.size(); ++i) {
    const double ni = double(end_[i] - begin_[i]);
    double a = 0;
    for (size_t j = 0; j < i; ++j) {
      a += inter_layer_[i][j] / (ni * double(end_[j] - begin_[j]));  // Eq. 9
      inter_sum_[i][j] += inter_layer_[i][j];
      inter_layer_[i][j] = 0;
    }
    a_sum_[i] += a;
    b_sum_[i] += intra_layer_[i] / (ni * ni);  // Eq. 9
    intra_layer_[i] = 0;
  }
  ++layers_;
}

VariantStats VariantStatsAccumulator::stats(size_t chunk) const {
  if (layers_ == 0) fail("internal: variant stats before any layer");
  const double L = layers_;
  VariantStats s;
  s.a_bar = float(a_sum_.at(chunk) / L);  // Eq. 10
  s.b_bar = float(b_sum_[chunk] / L);
  s.cci = float(cache_context_impact(s.a_bar, s.b_bar));  // Eq. 11
  for (double x : inter_sum_[chunk]) s.inter.push_back(float(x / L));
  const int64_t b = begin_[chunk], n = end_[chunk] - b;
  std::vector<uint32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0u);
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t x, uint32_t y) {
    return token_inter_[size_t(b + x)] > token_inter_[size_t(b + y)];
  });
  s.ranked = std::move(idx);
  return s;
}

uint64_t store_variant_rows(const Model& model, const KvStore& store, const ChunkKvMeta& meta, const VariantStats& stats,
                            const KvCache& kv, int64_t first, VariantLedger* ledger, size_t* evicted) {
  if (meta.context.empty()) fail("internal: chunk '{}': a variant needs a context (the canonical cache is precompute's)", meta.chunk_id);
  const int L = model.config().n_layer;
  const int64_t n = meta.n_tokens, d = model.config().kv_dim();
  std::vector<std::vector<uint16_t>> k(L), v(L);
  std::vector<const uint16_t*> kp(L), vp(L);
  for (int l = 0; l < L; ++l) {
    k[l].resize(size_t(n * d));
    v[l].resize(size_t(n * d));
    model.backend().download(kv.k[l].slice_rows(first, n), k[l].data());
    model.backend().download(kv.v[l].slice_rows(first, n), v[l].data());
    kp[l] = k[l].data();
    vp[l] = v[l].data();
  }
  const uint64_t bytes = store.kv_bytes(meta);  // in the store's encoding (core/kv/kv-quant.h)
  if (!ledger) {
    store.put(meta, kp, vp, &stats);
    return bytes;
  }
  std::vector<std::string> out;
  const bool ok = ledger->admit(bytes, [&] { store.put(meta, kp, vp, &stats); }, &out);
  if (evicted) *evicted += out.size();
  return ok ? bytes : 0;
}

VariantComputeStats precompute_variants(const Model& model, const PromptFormat& format, const KvStore& store,
                                        const std::vector<std::vector<const Chunk*>>& sequences, bool only_last,
                                        VariantLedger* ledger, const std::function<void(size_t, size_t)>& progress,
                                        ClaimSet* claims) {
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = model.config();
  const CacheKeys keys(model, format);
  const int64_t n_prefix = int64_t(format.prefix_ids().size());
  const int64_t ubatch = model.backend().prefill_rows();  // Model::forward's micro-batch

  // The keys each sequence wants; sequences with nothing missing are skipped.
  VariantComputeStats st;
  struct Job {
    std::vector<std::vector<int32_t>> ids;  // per chunk
    std::vector<size_t> want;               // chunk indices to store
    std::map<size_t, ChunkKvMeta> metas;    // their keys
  };
  std::vector<Job> jobs;
  std::set<std::string> wanted;  // file names: a variant two sequences share is computed by the first
  int64_t max_tokens = 1;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto& seq = sequences[s];
    if (seq.size() < 2) continue;
    Job j;
    std::vector<std::string> context;
    int64_t total = 0;
    for (size_t i = 0; i < seq.size(); ++i) {
      j.ids.push_back(format.chunk_ids(*seq[i]));
      total += int64_t(j.ids.back().size());
      if (i > 0 && (!only_last || i + 1 == seq.size())) {
        ChunkKvMeta m = keys.chunk(seq[i]->id, j.ids.back());
        m.context = context;
        if (store.has_valid(m)) {
          ++st.skipped;
          remove_stale_claim_of_finished(store.chunk_path(m));  // a killed run's, left beside its file
        } else if (wanted.insert(store.chunk_path(m).filename().string()).second) {
          j.want.push_back(i);
          j.metas.emplace(i, m);
        }
      }
      context.push_back(seq[i]->id);
    }
    if (j.want.empty()) continue;
    max_tokens = std::max(max_tokens, total);
    jobs.push_back(std::move(j));
  }
  st.sequences = jobs.size();
  if (n_prefix + max_tokens > c.n_ctx_train)
    fail("a variant sequence of {} tokens after the {}-token prefix exceeds the model's context of {}", max_tokens,
         n_prefix, c.n_ctx_train);
  if (jobs.empty()) {
    if (progress) progress(0, 0);
    return st;
  }

  KvCache kv = model.new_kv_cache(n_prefix + max_tokens);
  Workspace ws;
  model.forward(format.prefix_ids(), kv, ws);  // rows [0, n_prefix) stay for every sequence
  // Each wanted variant is a file; processes sharing the store claim them (core/kv/claimed-work.h): a
  // sequence is computed for the files this process claimed, again later for any it had to wait for
  // and then took over.
  std::vector<std::vector<std::filesystem::path>> files(jobs.size());
  std::map<std::filesystem::path, ChunkKvMeta> meta_of;
  for (size_t t = 0; t < jobs.size(); ++t)
    for (size_t i : jobs[t].want) {
      files[t].push_back(store.chunk_path(jobs[t].metas.at(i)));
      meta_of.emplace(files[t].back(), jobs[t].metas.at(i));
    }
  auto compute = [&](size_t t, const std::vector<std::filesystem::path>& to_store) {
    const Job& job = jobs[t];
    std::vector<int32_t> ids;
    std::vector<int64_t> begin, end;
    SegmentMass mass;
    mass.seg_begin = {0, n_prefix};
    for (const auto& c_ids : job.ids) {
      begin.push_back(n_prefix + int64_t(ids.size()));
      ids.insert(ids.end(), c_ids.begin(), c_ids.end());
      end.push_back(n_prefix + int64_t(ids.size()));
      mass.seg_begin.push_back(end.back());
    }
    VariantStatsAccumulator acc(begin, end, c.n_head);
    std::vector<float> out;
    mass.out = &out;
    // Model::forward's micro-batches, with the per-segment mass of every row on every layer. The
    // stats need layer means, so each layer's mass is accumulated per micro-batch and the layer
    // closed once all micro-batches passed it: micro-batches run layer-outer here.
    const int64_t n = int64_t(ids.size());
    for (int64_t i = 0; i < n; ++i) kv.pos[size_t(n_prefix + i)] = int32_t(n_prefix + i);
    std::vector<Workspace> per_batch;  // each micro-batch's residual stream between layers
    const int64_t n_batches = (n + ubatch - 1) / ubatch;
    per_batch.resize(size_t(n_batches));
    std::vector<std::vector<int32_t>> rows(static_cast<size_t>(n_batches));
    for (int64_t bi = 0; bi < n_batches; ++bi) {
      const int64_t first = bi * ubatch, nb = std::min(ubatch, n - first);
      rows[size_t(bi)].resize(size_t(nb));
      std::iota(rows[size_t(bi)].begin(), rows[size_t(bi)].end(), int32_t(n_prefix + first));
      model.embed(std::span(ids).subspan(size_t(first), size_t(nb)), per_batch[size_t(bi)]);
    }
    for (int l = 0; l < c.n_layer; ++l) {
      for (int64_t bi = 0; bi < n_batches; ++bi) {
        Workspace& w = per_batch[size_t(bi)];
        const auto& r = rows[size_t(bi)];
        const int64_t nb = int64_t(r.size());
        model.layer_qkv(l, nb, r, w, &kv, r);  // and the new K and V rows into the cache
        model.layer_attend_ffn(l, nb, r, kv, r.back() + 1, w, &mass);
        acc.add(r.front(), nb, out);
      }
      acc.end_layer();
    }
    kv.n_used = n_prefix + n;
    for (size_t i : job.want) {
      ChunkKvMeta m = job.metas.at(i);
      if (std::find(to_store.begin(), to_store.end(), store.chunk_path(m)) == to_store.end()) continue;
      m.first_pos = int32_t(begin[i]);
      const uint64_t written = store_variant_rows(model, store, m, acc.stats(i), kv, begin[i], ledger, &st.evicted);
      st.bytes_written += written;
      st.over_budget += written == 0;
    }
    st.tokens += n;
  };
  std::optional<ClaimSet> own_claims;
  if (!claims) claims = &own_claims.emplace();
  const ClaimedWorkStats cw = run_claimed_work(
      *claims, files, [&](const std::filesystem::path& f) { return store.has_valid(meta_of.at(f)); }, compute,
      progress);
  st.computed = cw.computed - st.over_budget;
  st.claimed_by_other = cw.claimed_by_other;
  st.taken_over = cw.taken_over;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace ragkv
