// Precompute: one prefix forward, then each chunk's forward after it; K/V rows downloaded per layer.
#include "core/rag/precompute.h"

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "core/kv/claim-set.h"
#include "core/kv/claimed-work.h"
#include "core/util/error.h"
#include "core/rag/cache-keys.h"
#include "core/rag/donor-reuse.h"
#include "core/format/checksum.h"
#include "retrieval/chunker.h"

namespace ragkv {

namespace {

// Rows [first, first + n) of every layer of kv, f16, and stores them under meta.
uint64_t store_rows(const Model& model, const KvStore& store, const ChunkKvMeta& meta, KvCache& kv, int64_t first) {
  const int L = model.config().n_layer;
  const int64_t n = meta.n_tokens, d = model.config().kv_dim();
  std::vector<std::vector<uint16_t>> k(L), v(L);
  std::vector<const uint16_t*> kp(L), vp(L);
  for (int l = 0; l < L; ++l) {
    k[l].resize(static_cast<size_t>(n * d));
    v[l].resize(static_cast<size_t>(n * d));
    model.backend().download(kv.k[l].slice_rows(first, n), k[l].data());
    model.backend().download(kv.v[l].slice_rows(first, n), v[l].data());
    kp[l] = k[l].data();
    vp[l] = v[l].data();
  }
  store.put(meta, kp, vp);
  return store.kv_bytes(meta);  // in the store's encoding (core/kv/kv-quant.h)
}

}  // namespace

PrecomputeStats precompute_chunks(const Model& model, const PromptFormat& format, const KvStore& store,
                                  const std::vector<const Chunk*>& chunks,
                                  const std::function<void(size_t, size_t)>& progress, ClaimSet* claims,
                                  const DonorFinder* donors) {
  const auto t0 = std::chrono::steady_clock::now();
  const CacheKeys keys(model, format);
  const int64_t n_prefix = int64_t(format.prefix_ids().size());
  int64_t max_chunk = 1;
  std::vector<std::vector<int32_t>> ids(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    ids[i] = format.chunk_ids(*chunks[i]);
    if (ids[i].empty()) fail("chunk '{}' has no tokens", chunks[i]->id);
    max_chunk = std::max<int64_t>(max_chunk, int64_t(ids[i].size()));
  }
  if (n_prefix + max_chunk > model.config().n_ctx_train)
    fail("a chunk of {} tokens after the {}-token prefix exceeds the model's context of {}", max_chunk,
         n_prefix, model.config().n_ctx_train);

  PrecomputeStats st;
  KvCache kv = model.new_kv_cache(n_prefix + max_chunk);
  Workspace ws;
  // The prefix: computed once (the same call `full` makes first), stored, kept in rows [0, n_prefix).
  model.forward(format.prefix_ids(), kv, ws);
  const ChunkKvMeta pm = keys.prefix();
  if (!store.has_valid(pm)) st.bytes_written += store_rows(model, store, pm, kv, 0);

  // Chunks already stored intact are skipped (resume); progress counts the others only, so its
  // rate and ETA are those of the work left.
  std::vector<size_t> todo;
  std::vector<std::vector<std::filesystem::path>> files;
  std::map<std::filesystem::path, ChunkKvMeta> meta_of;
  auto stored = [&](const ChunkKvMeta& m) { return store.has_valid(m) || (donors && store.has_valid(keys.donor(m))); };
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkKvMeta m = keys.chunk(chunks[i]->id, ids[i]);
    if (stored(m)) {
      ++st.skipped;
      remove_stale_claim_of_finished(store.chunk_path(m));  // a killed run's, left beside its file
    } else {
      todo.push_back(i);
      files.push_back({store.chunk_path(m)});
      meta_of.emplace(files.back()[0], m);
    }
  }
  std::optional<ClaimSet> own_claims;
  if (!claims) claims = &own_claims.emplace();
  const ClaimedWorkStats cw = run_claimed_work(
      *claims, files, [&](const std::filesystem::path& f) { return stored(meta_of.at(f)); },
      [&](size_t t, const std::vector<std::filesystem::path>&) {
        const size_t i = todo[t];
        const ChunkKvMeta m = keys.chunk(chunks[i]->id, ids[i]);
        st.tokens += int64_t(ids[i].size());
        kv.n_used = n_prefix;  // the prefix rows stay; the chunk goes after them
        if (const std::optional<DonorMatch> match = donors ? donors->find(*chunks[i], ids[i]) : std::nullopt) {
          try {
            const DonorBuild b =
                build_from_donor(model, format, keys, store, *match, chunks[i]->id, ids[i], donors->params(), kv, ws);
            const std::string donor = match->donor->id + "@" + checksum_hex(match->key.token_hash);
            st.bytes_written += store_rows(model, store, keys.donor(m, donor), kv, n_prefix);
            st.token_layers += b.computed_token_layers;
            ++st.from_donor;
            st.donor_shared_tokens += match->shared;
            st.donor_repaired_tokens += b.repaired_tokens;
            return;
          } catch (const CacheFileError& e) {  // the donor's cache failed its checks: computed whole
            std::fprintf(stderr, "precompute: warning: %s; chunk '%s' computed without it\n", e.what(),
                         chunks[i]->id.c_str());
            kv.n_used = n_prefix;
          }
        }
        model.forward(ids[i], kv, ws);
        st.bytes_written += store_rows(model, store, m, kv, n_prefix);
        st.token_layers += int64_t(ids[i].size()) * model.config().n_layer;
      },
      progress);
  st.computed = cw.computed;
  st.claimed_by_other = cw.claimed_by_other;
  st.taken_over = cw.taken_over;
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

}  // namespace ragkv
