// `ragkv bench cache` (a cache-manager trace): RAGCache's cache manager replayed over a query file's
// retrieval trace without computing KV. The decisions are the ones `answer --mode prefix` makes
// with an empty store and no disk budget — RAGCache's setting, exact prefix reuse from memory:
//   * the answering order of core/rag/query-order.h (input order, or whole-file grouping and
//     OrderPriority within the reorder window, §5.2), against the tree as it is at that moment;
//   * CRAFT's chunk order (§4, frequency order from the CA-Table, core/rag/chunk-access-table.h) and
//     the CP-Tree's promotion threshold, when asked;
//   * the knowledge tree (core/kv/knowledge-tree.h, no Mover: metadata only) with the same node sizes,
//     the same per-token cost of computed nodes (the profiled T(α, β)/β, Formula 4) and the same
//     replacement policy, budgets and swap-out-only-once.
// So hit counts equal a real run's on the same trace and cost profile; TTFT is the profile's
// estimate T(α, β) of each prompt's prefill (α tokens from memory, β computed), not a measurement.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kv/cache-policy.h"
#include "core/model/model-config.h"
#include "core/rag/context.h"
#include "core/rag/prompt.h"
#include "core/rag/queries.h"

namespace ragkv {

struct TraceRequest {
  std::vector<std::string> chunks;        // retrieval order
  std::vector<int64_t> chunk_tokens;      // per chunk
  int64_t prompt_tokens = 0;              // the whole prompt (prefix, chunks, question)
};

struct CacheTrace {
  std::vector<TraceRequest> requests;     // input order
  int64_t prefix_tokens = 0;              // the instruction prefix (the tree's root)
  uint64_t bytes_per_token = 0;           // of a node's K and V (f16), as the tiers count them
  size_t distinct_chunks = 0;
};

// The trace of a query file: each query's retrieved chunks, their tokens and the prompt's length
// in `format` (progress on stderr).
CacheTrace read_cache_trace(const ContextRetriever& retriever, const PromptFormat& format, const ModelConfig& cfg,
                            const std::vector<Query>& queries);

struct TraceConfig {
  CachePolicy policy = CachePolicy::pgdsf;
  uint64_t host_bytes = 0;
  bool reorder = false;                   // RAGCache §5.2 (answer's default); false: --no-reorder
  size_t reorder_window = 64;
  bool freq_order = false;                // --chunk-order freq
  size_t ca_window = 1000;
  int64_t promotion_threshold = 1;
};

struct TraceResult {
  size_t requests = 0;
  double retrieved_chunks = 0;
  double hit_chunks = 0;                  // served from memory (RAGCache's hit: a chunk of the matched path)
  double prompt_tokens = 0, computed_tokens = 0;
  double ttft_ms = 0, full_ttft_ms = 0;   // Σ T(α, β) and Σ T(0, prompt)
  double prefix_overlap = 0, total_overlap = 0;  // CRAFT §3 over the answering sequence
  size_t evicted = 0, rejected = 0;       // host tier
  uint64_t peak_bytes = 0;                // host tier, after each request
  nlohmann::json to_json() const;
};

TraceResult replay_cache_trace(const CacheTrace& trace, const PrefillCostModel& cost, const TraceConfig& config);

}  // namespace ragkv
