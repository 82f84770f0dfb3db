// `ragkv bench retrieval`: retrieval quality and latency of an INDEX_DIR on a query file with
// gold passages — HNSW recall@k against the exact search, gold-passage hit rate in the top-k,
// query latency (embed + search), and the staged search's convergence (RAGCache §5.3).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace ragkv {

class Embedder;
class IndexDir;

struct RetrievalBenchOptions {
  std::string queries_path;  // JSONL with "question" and "gold_passages"
  size_t max_queries = 1000;
  size_t k = 5;              // hit rate at k
  size_t recall_k = 10;      // HNSW recall@recall_k against the exact search
  size_t staged_slice = 32;  // distance computations per staged-search snapshot
};

nlohmann::json bench_retrieval(const IndexDir& index, Embedder& embedder, const RetrievalBenchOptions& opt);

}  // namespace ragkv
