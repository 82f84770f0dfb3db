// The plan of one prompt's prefill (DESIGN.md §2 "plan"), made before any layer runs: for each
// segment where its KV comes from (a cache in some tier, or computed), whether that cache is an
// exact prefix, which rows are computed on each layer, and the gradual-filtering schedule of the
// HKVD selection, or craft's variant choice per chunk. The fusor (core/rag/fusor.h) executes a plan.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/kv/kv-tiers.h"
#include "core/kv/segment-kv.h"
#include "core/rag/cache-keys.h"
#include "core/rag/prompt.h"
#include "core/rag/reuse-mode.h"
#include "core/rag/variant-choice.h"

namespace ragkv {

// How blend chooses the reused tokens it recomputes. The deviation and attention methods score
// every candidate on each check layer and keep the best (gradual filtering, CacheBlend §4.3);
// `sink` recomputes a fixed set decided before any layer runs; combinations share the budget.
enum class Selection : uint8_t {
  kv,          // ‖ΔK‖² + ‖ΔV‖² of each token against its cache (CacheBlend §4.1, as the paper writes it)
  v,           // ‖ΔV‖² only (what the CacheBlend authors' code ranks by)
  head_v,      // ‖ΔV‖² per KV head, each head's divided by its mean over the candidates, summed
  random,      // uniformly random candidates: the control every method must beat
  question,    // attention mass the question's queries put on each token (ProphetKV, A³)
  sink,        // the first tokens of every repositioned chunk, on every layer (EPIC's LegoLink)
  sink_v,      // sink tokens, then ‖ΔV‖² for the rest of the budget
  question_v,  // question attention and ‖ΔV‖², each normalised by its mean, summed
  prophet,     // two stages: the question's attention over the reused KV on every layer (a reuse
               // pass) ranks the tokens, then the best are recomputed (ProphetKV's question relevance)
};
const char* selection_name(Selection s);
Selection parse_selection(const std::string& s);  // Error listing the methods
std::vector<std::string> selection_names();

struct BlendParams {
  double recompute_ratio = 0.15;  // r: fraction of the reused, repositioned tokens recomputed per layer
  int check_layers = 3;           // HKVD selection on layers 1..check_layers (gradual filtering);
                                  // 1 is the authors' single-check-layer variant
  std::vector<int> check_at;      // explicit check layers (ascending); overrides check_layers
  Selection selection = Selection::kv;
  int sink_tokens = 0;            // sink methods: first tokens per chunk; 0: ⌈r·|chunk|⌉ for sink
                                  // alone, 4 in combinations
  uint64_t seed = 1;              // random: the selection is a function of (seed, prompt, layer)
  double adaptive_mass = 0;       // > 0: per query, keep the fewest candidates holding this share
                                  // of the candidates' score mass, within [½, 2] × the fixed count
                                  // (a query whose tokens matter more gets more recompute)
  int preload_depth = 2;          // layers the loader may read ahead of compute
};

// Where one prompt segment's KV comes from.
struct SegmentPlan {
  std::shared_ptr<const SegmentKv> kv;  // null: the segment is computed
  int64_t begin = 0;                    // the segment's position in this prompt
  int64_t n_tokens = 0;
  std::vector<std::string> context;     // the chunk ids before it in this prompt
  std::optional<VariantChoice> choice;  // craft, auto: the variant chosen and its CFO (auto: only
                                        // where the chunk has metadata; blend selects in the others)
  std::vector<int32_t> fix;             // its tokens (0-based) recomputed
  int64_t end() const { return begin + n_tokens; }
  // Cached after exactly this prompt's preceding chunks (the whole chain, never the position
  // alone) at this position: an exact prefix hit, reused as is. A donor cache (built from an
  // earlier version of the chunk, core/rag/donor-reuse.h) never is.
  bool exact() const {
    return kv && kv->meta().context == context && kv->meta().first_pos == begin && kv->meta().donor.empty();
  }
};

// Cache lookups of one prompt, per tier where the KV was found.
struct CacheCounts {
  int device_hits = 0, host_hits = 0, disk_hits = 0;
  int exact_hits = 0;  // hits at their canonical position (exact prefix hits)
  int misses = 0;      // no cache for the segment (or a store of another model): computed
  int bad = 0;         // a cache that failed its checks (header, checksum, truncation): computed
  int hits() const { return device_hits + host_hits + disk_hits; }
  void add_hit(KvTier t, int n = 1);
};

// One check layer of the HKVD selection (CacheBlend §4.3): after layer `layer`'s KV deviation is
// measured, `keep` of the candidate rows stay active.
struct CheckLayer {
  int layer = 0;
  size_t keep = 0;
};

struct PrefillPlan {
  ReuseMode mode = ReuseMode::full;
  std::vector<SegmentPlan> segments;  // one per prompt segment, in prompt order
  CacheCounts counts;
  int64_t n_tokens = 0;
  // Leading segments (the prefix included) whose KV is the knowledge tree's exact path (RAGCache
  // §5.1): the prefix, chunk 1's canonical cache, then chain nodes — bit-identical to full's rows.
  size_t exact_path = 0;

  // full, prefix: groups of segments computed by one Model::forward call each — one per segment,
  // [prefix], [chunk 1], …, [chunk k], [question]: the calls precompute makes for the canonical
  // caches and the answerer for knowledge-tree nodes, so a reused exact path is bit-identical to a
  // recomputed one; the first `loaded_groups` are loaded instead.
  std::vector<std::pair<size_t, size_t>> dense_groups;
  size_t loaded_groups = 0;

  // reuse, blend: rows computed from layer 0 on (ascending), rows the selection chooses from
  // (reused at a new position; exact-prefix rows are never recomputed), rows recomputed on every
  // layer whatever the selection (sink tokens), and the selection schedule (empty for reuse).
  std::vector<int32_t> active;
  std::vector<uint8_t> candidate;  // [n_tokens]
  std::vector<uint8_t> reused;     // [n_tokens]: the row's KV comes from a cache
  int64_t n_candidates = 0;
  int64_t n_forced = 0;            // sink rows (reused rows recomputed on every layer)
  std::vector<CheckLayer> checks;
  // prophet: the candidates are ranked before layer 0 by a first, reuse pass; pre_keep of them
  // are recomputed (checks is empty).
  bool pre_select = false;
  size_t pre_keep = 0;

  bool sparse() const { return mode != ReuseMode::full && mode != ReuseMode::prefix; }
  int64_t reused_tokens() const;           // tokens whose KV comes from a cache
  std::vector<size_t> cached_segments(size_t first = 0, size_t last = size_t(-1)) const;
  // A cache that failed while loading: the segment is computed instead and counted as bad;
  // the rows and the schedule are derived again.
  void drop_cache(size_t segment);
  // The loading controller chose to compute a cached segment in place: the same as drop_cache,
  // but neither a hit nor bad.
  void compute_instead(size_t segment);
  // blend: another r (the loading controller's hidden ratio); the rows and schedule derived again.
  void set_recompute_ratio(double r);

  // Filled by the planner; kept for drop_cache.
  BlendParams blend;
  CraftParams craft;
  int n_layer = 0;

 private:
  void release_cache(size_t segment, bool bad);
};

// A segment's cache from wherever caches are kept: nullptr when there is none; throws
// CacheFileError for one that fails its header checks.
using SegmentLookup = std::function<std::shared_ptr<const SegmentKv>(const PromptSegment&)>;
// The lookup of a segment's key (keys) in the tiers — a chunk without a canonical cache takes its
// donor cache, if any (core/rag/donor-reuse.h: never exact, so only the sparse modes reuse it);
// an empty lookup when tiers is null.
SegmentLookup tier_lookup(const CacheKeys& keys, const KvTiers* tiers);
// The knowledge-tree node of a segment computed exactly after `chain` (the ids of the chunk
// segments before it, non-empty; RAGCache §5.1): nullptr when none is cached; CacheFileError
// for one that fails its header checks.
using ChainLookup =
    std::function<std::shared_ptr<const SegmentKv>(const PromptSegment&, const std::vector<std::string>& chain)>;
ChainLookup tier_chain_lookup(const CacheKeys& keys, const KvTiers* tiers);

// craft: a chunk's cached variants (the canonical cache first when there is one, else its donor
// cache), and the KV of the one chosen.
struct VariantSource {
  std::function<std::vector<VariantCandidate>(const PromptSegment&)> candidates;
  std::function<std::shared_ptr<const SegmentKv>(const ChunkKvMeta&)> open;  // CacheFileError when bad
};
VariantSource tier_variants(const CacheKeys& keys, const KvTiers* tiers);

// Looks every cacheable segment of prompt up (an empty lookup: nothing is cached) and plans the
// prefill of `mode`. `full` looks nothing up. Every other mode first walks the knowledge tree
// (RAGCache §5.1): the prefix and chunk 1 by `lookup` (their canonical caches are exact), then
// chunk i by `chain` after chunks 1..i−1, as far as exact nodes go; that path is reused as is.
// `prefix` stops there; the sparse modes look the remaining segments up as before. The question
// is never cached. Caches that fail their header checks count as bad.
// craft chooses each remaining chunk's variant from `variants` (Cache-Craft §3.2: lowest CFO)
// and recomputes its fix tokens; auto does so for the chunks with variant metadata (or an exact
// chain) and leaves the others to blend's selection.
//
// carried (sparse modes): KV for the prompt's leading segments computed at exactly their positions
// after exactly the segments before them (a conversation's previous turn, core/rag/answer.h
// CarriedKv), one per segment from the first, null-free; they are reused as an exact prefix in
// place of the knowledge tree's path, and the lookups start after them.
PrefillPlan plan_prefill(const RagPrompt& prompt, ReuseMode mode, const BlendParams& blend, int n_layer,
                         const SegmentLookup& lookup, const VariantSource* variants = nullptr,
                         const CraftParams& craft = {}, const ChainLookup& chain = {},
                         const std::vector<std::shared_ptr<const SegmentKv>>& carried = {});

// Gradual filtering schedule (CacheBlend §4.3): the fraction of the candidate tokens kept after
// each of `checks` check layers, from a little above r down to r.
std::vector<double> gradual_filter_fractions(double r, int checks);
// Indices of the `keep` largest values (ties: lower index first), ascending.
std::vector<int32_t> top_k_indices(const std::vector<float>& values, size_t keep);
// HKVD selection on a check layer (CacheBlend §4.1, §4.3): of the active rows (indices into
// `active`), those that are not candidates stay, and of the candidates the `keep` with the
// largest KV deviation. deviation[i] belongs to active[i]. Ascending indices into `active`.
std::vector<int32_t> select_hkvd_rows(const std::vector<int32_t>& active, const std::vector<uint8_t>& candidate,
                                      const std::vector<float>& deviation, size_t keep);
// Per-query adaptivity: the fewest of the candidates' scores (descending) whose sum reaches
// `mass` of their total, clamped to [keep / 2, min(2 · keep, candidates)]; `keep` when mass ≤ 0.
size_t adaptive_keep(const std::vector<int32_t>& active, const std::vector<uint8_t>& candidate,
                     const std::vector<float>& score, size_t keep, double mass);

}  // namespace ragkv
