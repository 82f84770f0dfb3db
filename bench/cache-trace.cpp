// replay_cache_trace: the knowledge tree, query order and chunk order of `answer --mode prefix`
// over a recorded retrieval trace (see the header for what is and is not simulated).
#include "bench/cache-trace.h"

#include <algorithm>
#include <optional>
#include <set>

#include "core/kv/chunk-kv-file.h"
#include "core/kv/knowledge-tree.h"
#include "core/rag/chunk-access-table.h"
#include "core/rag/chunk-overlap.h"
#include "core/rag/query-order.h"
#include "core/util/progress.h"

namespace ragkv {

nlohmann::json TraceResult::to_json() const {
  const double n = requests > 0 ? double(requests) : 1.0;
  return {{"requests", requests},
          {"hit_rate", retrieved_chunks > 0 ? hit_chunks / retrieved_chunks : 0.0},
          {"hit_chunks", hit_chunks},
          {"retrieved_chunks", retrieved_chunks},
          {"computed_tokens_vs_full", prompt_tokens > 0 ? computed_tokens / prompt_tokens : 0.0},
          {"computed_tokens", computed_tokens},
          {"prompt_tokens", prompt_tokens},
          {"ttft_ms_estimated", ttft_ms / n},
          {"full_ttft_ms_estimated", full_ttft_ms / n},
          {"ttft_ratio_estimated", full_ttft_ms > 0 ? ttft_ms / full_ttft_ms : 0.0},
          {"craft_prefix_overlap", prefix_overlap},
          {"craft_total_overlap", total_overlap},
          {"host_evicted", evicted},
          {"host_rejected", rejected},
          {"host_peak_bytes", peak_bytes}};
}

TraceResult replay_cache_trace(const CacheTrace& trace, const PrefillCostModel& cost, const TraceConfig& config) {
  KnowledgeTree tree(config.policy, TierBudgets{{0, config.host_bytes, 0}});
  std::vector<QueryShape> shapes;
  for (const TraceRequest& r : trace.requests) {
    QueryShape s;
    s.path = {kPrefixChunkId};
    s.path.insert(s.path.end(), r.chunks.begin(), r.chunks.end());
    s.prompt_tokens = r.prompt_tokens;
    shapes.push_back(std::move(s));
  }
  QueryOrder order(std::move(shapes), config.reorder_window, config.reorder, /*exact_only=*/true);
  ChunkAccessTable ca(config.ca_window, config.promotion_threshold);
  std::vector<std::vector<std::string>> answered;
  TraceResult out;
  while (const std::optional<size_t> next = order.next(&tree)) {
    const TraceRequest& r = trace.requests.at(*next);
    // CRAFT §4: the request admitted as answer admits it (ChunkAccessTable::admit).
    const ChunkAccessTable::Admission admission = ca.admit(r.chunks, config.freq_order);
    const std::vector<std::string> ids = permuted(r.chunks, admission.order);
    const std::vector<int64_t> tokens = permuted(r.chunk_tokens, admission.order);
    const std::vector<uint8_t>& promote = admission.promote;

    std::vector<std::string> path{kPrefixChunkId};
    path.insert(path.end(), ids.begin(), ids.end());
    std::vector<int64_t> seg_tokens{trace.prefix_tokens};
    seg_tokens.insert(seg_tokens.end(), tokens.begin(), tokens.end());
    const std::vector<int> matched = tree.match(path);
    int64_t alpha = 0;
    for (size_t d = 0; d < matched.size(); ++d) alpha += seg_tokens[d];
    const int64_t beta = r.prompt_tokens - alpha;
    // What answer's tree_nodes() reports: the matched path from memory, the rest computed, at
    // the prompt's profiled cost per token (RAGCache Formula 4's Cost_i / NewSize_i).
    const double compute_cost = beta > 0 ? cost.estimate_ms(double(alpha), double(beta)) / double(beta) : 0.0;
    std::vector<NodeUse> uses;
    for (int n : matched) uses.push_back({n, tree.top_tier(n), 0.0, true});
    bool promoted = true;
    for (size_t d = matched.size(); d < path.size(); ++d) {
      if (d > 0) promoted = promoted && (promote.empty() || promote[d - 1]);
      const std::span<const std::string> prefix(path.data(), d + 1);
      int n = tree.find(prefix);
      if (n < 0) n = tree.add(prefix, seg_tokens[d], uint64_t(seg_tokens[d]) * trace.bytes_per_token);
      uses.push_back({n, std::nullopt, compute_cost, promoted});
    }
    tree.record_request(uses);

    ++out.requests;
    out.retrieved_chunks += double(ids.size());
    out.hit_chunks += matched.empty() ? 0.0 : double(matched.size() - 1);  // the prefix is not a chunk
    out.prompt_tokens += double(r.prompt_tokens);
    out.computed_tokens += double(beta);
    out.ttft_ms += cost.estimate_ms(double(alpha), double(beta));
    out.full_ttft_ms += cost.estimate_ms(0.0, double(r.prompt_tokens));
    out.peak_bytes = std::max(out.peak_bytes, tree.bytes(KvTier::host));
    answered.push_back(std::move(ids));
  }
  const TierStats host = tree.stats(KvTier::host);
  out.evicted = host.evicted;
  out.rejected = host.rejected;
  const ChunkOverlap o = chunk_overlap(answered);
  out.prefix_overlap = o.prefix;
  out.total_overlap = o.total;
  return out;
}

CacheTrace read_cache_trace(const ContextRetriever& retriever, const PromptFormat& format, const ModelConfig& cfg,
                            const std::vector<Query>& queries) {
  CacheTrace trace;
  trace.prefix_tokens = int64_t(format.prefix_ids().size());
  trace.bytes_per_token = uint64_t(cfg.n_layer) * cfg.kv_dim() * 2 * sizeof(uint16_t);
  std::set<std::string> distinct;
  Progress bar("bench cache: retrieve", int64_t(queries.size()), "queries");
  for (const Query& q : queries) {
    const RagContext ctx = retriever.context_for(q);
    const RagPrompt prompt = format.build(ctx.chunks, q.question);
    TraceRequest r;
    for (const PromptSegment& seg : prompt.segments)
      if (seg.kind == PromptSegment::Kind::chunk) {
        r.chunks.push_back(seg.chunk_id);
        r.chunk_tokens.push_back(int64_t(seg.ids.size()));
        distinct.insert(seg.chunk_id);
      }
    r.prompt_tokens = prompt.n_tokens();
    trace.requests.push_back(std::move(r));
    bar.add();
  }
  bar.finish();
  trace.distinct_chunks = distinct.size();
  return trace;
}

}  // namespace ragkv
