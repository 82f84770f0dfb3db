// Retrieval benchmark over the first N queries of a query file that names gold passages.
#include "bench/retrieval-bench.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "bench/stats.h"
#include "core/rag/queries.h"
#include "core/util/error.h"
#include "core/model/embedder.h"
#include "retrieval/index-dir.h"
#include "retrieval/staged-metrics.h"

namespace ragkv {

nlohmann::json bench_retrieval(const IndexDir& index, Embedder& embedder, const RetrievalBenchOptions& opt) {
  using clock = std::chrono::steady_clock;
  QueryFile qf = load_queries(opt.queries_path, OnError::fail);
  if (qf.queries.size() > opt.max_queries) qf.queries.resize(opt.max_queries);

  const auto& chunks = index.chunks();
  std::vector<double> latency_ms, work_fraction;
  double recall_sum = 0;
  size_t with_gold = 0, gold_hits = 0;
  for (const Query& q : qf.queries) {
    const std::set<std::string> gold(q.gold_passages.begin(), q.gold_passages.end());
    const auto t0 = clock::now();
    const std::vector<float> e = embedder.embed({q.question});
    const std::vector<Hit> hits = index.search(e, opt.k);
    latency_ms.push_back(std::chrono::duration<double, std::milli>(clock::now() - t0).count());

    if (!gold.empty()) {
      ++with_gold;
      gold_hits += std::any_of(hits.begin(), hits.end(), [&](const Hit& h) { return gold.count(chunks[h.chunk].doc) > 0; });
    }
    const std::vector<Hit> approx = index.search(e, opt.recall_k), exact = index.search(e, opt.recall_k, true);
    std::set<size_t> truth;
    for (const Hit& h : exact) truth.insert(h.chunk);
    size_t found = 0;
    for (const Hit& h : approx) found += truth.count(h.chunk);
    recall_sum += exact.empty() ? 1.0 : double(found) / double(exact.size());

    StagedSearch staged = index.staged_search(e, opt.k);
    work_fraction.push_back(final_topk_work_fraction(run_staged_search(staged, opt.staged_slice)));
  }
  const FractionSummary fs = summarize_fractions(work_fraction);
  return {
      {"queries", qf.queries.size()},
      {"chunks", chunks.size()},
      {"k", opt.k},
      {"gold_hit_rate_at_k", with_gold ? double(gold_hits) / double(with_gold) : 0.0},
      {"queries_with_gold", with_gold},
      {"hnsw_recall_at_" + std::to_string(opt.recall_k), recall_sum / double(qf.queries.size())},
      {"query_latency_ms_median", median_of(latency_ms)},
      {"staged_final_topk_work_fraction_median", fs.median},
      {"staged_final_topk_work_fraction_p90", fs.p90},
  };
}

}  // namespace ragkv
