// The prefill of a RAG prompt from chunk caches (DESIGN.md §4 "The fusor"): executes a
// PrefillPlan (core/rag/plan.h). Cached segments' KV comes through the one KV feed (core/kv/segment-kv.h),
// from whichever tier holds it, layer by layer.
//   dense  (full, prefix): Model::forward over the plan's segment groups; leading groups with
//          exact caches are loaded instead of computed, so their output is bit-identical.
//   sparse (reuse, blend, craft): the layer loop stepped over the active rows only; cached
//          segments are installed at their new positions (K rotated by the position difference)
//          while the previous layer computes; on blend's check layers the HKVD rows are selected;
//          craft follows the question's attention per chunk and, once Algorithm 1 has found the
//          focused chunks, stops recomputing the others (Cache-Craft §3.2.2).
// KV rows are positions: row i of the prompt's KvCache holds token i.
#pragma once
#include <cstdint>
#include <vector>

#include "core/model/model.h"
#include "core/rag/plan.h"
#include "core/rag/prompt.h"
#include "core/rag/variant-compute.h"

namespace ragkv {

struct PrefillStats {
  double prefill_ms = 0;       // wall time of the whole prefill, loading included
  double load_ms = 0;          // loader busy time: reading + verifying cached layers
  double load_wait_ms = 0;     // compute time lost waiting for the loader
  int64_t prompt_tokens = 0;
  int64_t computed_token_layers = 0;  // Σ over layers of the tokens whose K/V were computed
  int64_t reused_tokens = 0;          // tokens whose K/V came from a cache on at least one layer
  int64_t recomputed_reused_token_layers = 0;  // Σ over layers of the reused tokens recomputed there
  double compute_fraction() const;  // computed token-layers, every pass, / full's (prompt tokens × layers)
  // The compute of a prefill is compute_fraction: every token-layer computed by every pass
  // (prophet's question pass, blend's check layers, craft's fix, the recompute, a fallback's full
  // prefill) over full's. This one is a diagnostic of the selection alone: recomputed reused
  // token-layers over reused token-layers — what blend's r is nominally.
  double reused_recompute_fraction() const;
  std::vector<int32_t> row_layers;  // per prompt row: the layers it was computed on, every pass
  std::vector<int32_t> final_rows;  // the rows computed on the last layer of the final pass, ascending
  std::vector<std::vector<int32_t>> kept_after_check;  // blend: the active rows after each check layer
  int focus_cutoff_layer = -1;         // craft: L* of Algorithm 1 (−1: recompute ran every layer)
  std::vector<int32_t> focused_chunks;  // craft: F*, chunk indices in prompt order
  // prophet: the first step of its first, reuse pass — the prompt before any token is repaired —
  // its greedy token and top-2 probability gap (−1: no such pass). A signal available before
  // decoding: where the repair moved the first token, the composed prompt is near a tie.
  int32_t first_pass_token = -1;
  double first_pass_margin = -1;
  int n_layer = 0;
};

struct PrefillResult {
  std::vector<float> logits;  // of the last prompt token (the first decoding step)
  PrefillStats stats;
};

// Prefills prompt into kv (capacity ≥ prompt tokens; n_used becomes the prompt length) as plan
// says. Throws ChunkLoadFailed (core/kv/layer-loader.h) with the segment's index as `job` when a cache
// fails while loading: the caller calls plan.drop_cache(job) and prefills again.
// collect (sparse plans only; may be null): fed the per-segment attention mass of the active rows
// on every layer of the final pass — segments [prefix, chunk 1, …, chunk k, question] — so the
// chunks computed here can be stored as variants with their metadata (write-back).
PrefillResult prefill_prompt(const Model& model, const RagPrompt& prompt, const PrefillPlan& plan, KvCache& kv,
                             Workspace& ws, VariantStatsAccumulator* collect = nullptr);

}  // namespace ragkv
