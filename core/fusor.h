// The prefill of a RAG prompt from chunk caches (DESIGN.md §4 "The fusor"), one function per
// reuse mode:
//   full    no reuse: the prompt computed from scratch (the oracle);
//   prefix  the exact prefix [BOS][instruction][chunk 1] taken from the store, the rest computed
//           — the same calls as `full`, so its output is bit-identical;
//   reuse   every cached chunk reused at its new position with RoPE fixed, only the question
//           (and chunks without a cache) computed: the "full KV reuse" baseline;
//   blend   CacheBlend: reuse, then selectively recompute the High-KV-Deviation tokens, chosen by
//           gradual filtering over the first layers (CacheBlend §4.2–4.3).
// KV rows are positions: row i of the prompt's KvCache holds token i.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/kv-store.h"
#include "core/model.h"
#include "core/resident-kv.h"
#include "core/rag-prompt.h"

namespace ragkv {

enum class ReuseMode : uint8_t { full, prefix, reuse, blend };
const char* reuse_mode_name(ReuseMode m);
ReuseMode parse_reuse_mode(const std::string& s);  // Error listing the modes

struct BlendParams {
  double recompute_ratio = 0.15;  // r: fraction of the reused, repositioned tokens recomputed per layer
  int check_layers = 3;           // HKVD selection on layers 1..check_layers (gradual filtering);
                                  // 1 is the authors' single-check-layer variant
  int preload_depth = 2;          // layers the loader may read ahead of compute
};

// Where one prompt segment's KV comes from: a verified cache, or nothing (compute it).
struct SegmentSource {
  std::optional<ChunkKvReader> cache;
  // Set (with cache, which still names the chunk and its position): the KV is already in the
  // backend's memory and is copied there rather than loaded from the file.
  std::shared_ptr<const ResidentChunkKv> resident;
  bool exact() const;  // cached at the position it was computed at (an exact prefix hit)
  int64_t begin = 0;   // the segment's position in this prompt
};

struct PrefillStats {
  double prefill_ms = 0;       // wall time of the whole prefill, loading included
  double load_ms = 0;          // loader busy time: reading + verifying cached layers
  double load_wait_ms = 0;     // compute time lost waiting for the loader
  int64_t prompt_tokens = 0;
  int64_t computed_token_layers = 0;  // Σ over layers of the tokens whose K/V were computed
  int64_t reused_tokens = 0;          // tokens whose K/V came from a cache on at least one layer
  double recompute_fraction() const;  // computed token-layers / (prompt tokens × layers)
  int n_layer = 0;
};

struct PrefillResult {
  std::vector<float> logits;  // of the last prompt token (the first decoding step)
  PrefillStats stats;
};

// Prefills prompt into kv (capacity ≥ prompt tokens; n_used becomes the prompt length) by the
// rules of mode, taking KV from sources[s] for segment s where a cache is given. Throws
// ChunkLoadFailed (core/kv-loader.h) when a cache fails while loading: the caller drops that
// cache and calls again.
PrefillResult prefill_prompt(const Model& model, const RagPrompt& prompt, std::vector<SegmentSource>& sources,
                             ReuseMode mode, const BlendParams& blend, KvCache& kv, Workspace& ws);

// Gradual filtering schedule (CacheBlend §4.3): the fraction of the candidate tokens kept after
// each of `checks` check layers, from a little above r down to r.
std::vector<double> gradual_filter_fractions(double r, int checks);
// Indices of the `keep` largest values (ties: lower index first), ascending.
std::vector<int32_t> top_k_indices(const std::vector<float>& values, size_t keep);

}  // namespace ragkv
