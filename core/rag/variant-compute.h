// Computing Cache-Craft chunk variants (DESIGN.md §4 "Chunk caches"; cache-craft.txt §3.1, §3.3):
// a sequence of chunks computed after the instruction prefix, as a prompt would hold them; each
// chunk after the first is stored as the variant of its context (the chunks before it) with the
// metadata the variant choice reads — inter-attention from each context chunk, intra-attention,
// ā, b̄, CCI and its tokens ranked by inter-attention — measured by the attention kernels' per-
// segment mass while computing, averaged over layers. Sources of sequences (precompute): a
// warm-up query file replayed as `answer` would retrieve it, and each chunk after its nearest
// neighbours in the index (FusionRAG's offline step).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/kv/claim-set.h"
#include "core/kv/kv-store.h"
#include "core/model/model.h"
#include "core/rag/prompt.h"

namespace ragkv {

struct Chunk;

// Per-row attention mass of one computed sequence, reduced to what Eq. 3–4 and 9–10 need.
// Segments: [0] the prefix, then one per chunk. Fed per layer with the kernels' mass output.
class VariantStatsAccumulator {
 public:
  // chunk_begin[i]: first KV row of chunk i; chunk_end likewise; n_head: heads per row; n_seg:
  // segments of the mass (0: 1 + chunks; more when later segments, e.g. a question, follow).
  VariantStatsAccumulator(std::vector<int64_t> chunk_begin, std::vector<int64_t> chunk_end, int n_head, size_t n_seg = 0);
  // One layer's mass for query rows [first_row, first_row + n_rows): mass[(r·n_head + h)·n_seg + s],
  // segment 0 the prefix (excluded from inter and intra: every prompt has it), segment 1 + i chunk i.
  void add(int64_t first_row, int64_t n_rows, const std::vector<float>& mass);
  // The same for the query rows `rows` (ascending, any gaps).
  void add_rows(std::span<const int32_t> rows, const std::vector<float>& mass);
  void end_layer();
  // Chunk i's stats (Eq. 9–11, 14): layer means; requires ≥ 1 layer ended.
  VariantStats stats(size_t chunk) const;

 private:
  std::vector<int64_t> begin_, end_;
  int n_head_;
  size_t n_seg_;
  int layers_ = 0;
  std::vector<std::vector<double>> inter_layer_;  // [chunk i][context chunk j]: this layer's Σ mass
  std::vector<double> intra_layer_;
  std::vector<double> a_sum_, b_sum_;                // Σ over layers of a_l, b_l
  std::vector<std::vector<double>> inter_sum_;       // Σ over layers of inter_l(C_j, C_i)
  std::vector<double> token_inter_;                  // per KV row: Σ over layers of mass on earlier chunks
};

class VariantLedger;

struct VariantComputeStats {
  size_t sequences = 0, computed = 0, skipped = 0;  // variants stored / already intact
  size_t claimed_by_other = 0, taken_over = 0;      // as PrecomputeStats (core/rag/precompute.h)
  size_t over_budget = 0, evicted = 0;              // not admitted / evicted to admit others
  int64_t tokens = 0;                               // tokens computed
  uint64_t bytes_written = 0;
  double seconds = 0;
};

// Stores rows [first, first + meta.n_tokens) of every layer of kv as the variant `meta` (its
// context non-empty: never the canonical key) with stats, admitted under the store's budget by
// ledger when given (*evicted counts what made room). Returns the bytes written, 0 when the
// budget could not admit it.
uint64_t store_variant_rows(const Model& model, const KvStore& store, const ChunkKvMeta& meta, const VariantStats& stats,
                            const KvCache& kv, int64_t first, VariantLedger* ledger, size_t* evicted = nullptr);

// For every sequence, the variants of its chunks after the first (chunk k's context: chunks
// 0..k−1) that `only_last` (just the last chunk: neighbour sequences) and the store leave missing
// are computed and stored; a sequence whose wanted variants are all intact is skipped (resume).
// The canonical caches are not touched (precompute_chunks makes them). progress(done, total)
// counts the variants left to compute (done: computed here or by another process). With a ledger, each variant is admitted under the store's variant budget
// (core/kv/variant-ledger.h: the lowest-f_r variants are evicted to make room). Each variant file is
// claimed first (core/kv/claimed-work.h; claims nullptr: a ClaimSet of the default lease), so processes
// sharing the store compute each once; a sequence whose variants are partly another's is computed
// for the rest.
VariantComputeStats precompute_variants(const Model& model, const PromptFormat& format, const KvStore& store,
                                        const std::vector<std::vector<const Chunk*>>& sequences, bool only_last,
                                        VariantLedger* ledger = nullptr,
                                        const std::function<void(size_t, size_t)>& progress = {},
                                        ClaimSet* claims = nullptr);

}  // namespace ragkv
