// The order a batch's queries are answered in (RAGCache §5.2, cache-aware reordering):
// a batch tool has retrieved every query's chunks before answering any, so it can answer the
// queries that share chunk prefixes one after another and, among the queries in a window, the one
// whose prompt the knowledge tree covers best first. Answers are still written in input order
// (the caller's job); this class only says which query comes next.
//   * Whole-file grouping: the queries sorted by their chunk sequence (stable), so queries with a
//     common chunk prefix are adjacent — a prefix is computed once and then found in the tree.
//   * Within the first `window` queries of that order not yet answered: the highest
//     OrderPriority = cached length / computation length (RAGCache §5.2), where cached length is
//     the tokens of the prompt's longest knowledge-tree path held in device or host memory (for
//     the modes that also reuse a chunk's canonical cache at another position, the prefix plus
//     every chunk whose canonical cache is in memory, when that is more) and computation length
//     the rest of the prompt; ties go to the grouped order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/kv/knowledge-tree.h"

namespace ragkv {

struct QueryShape {
  std::vector<std::string> path;  // its knowledge-tree path: "@prefix", then its chunk ids in prompt order
  int64_t prompt_tokens = 0;      // the whole prompt's
};

class QueryOrder {
 public:
  // reorder false: input order (--no-reorder). window 0: the whole file is one window.
  // exact_only: the mode reuses exact prefixes only (prefix), so only the tree path counts.
  QueryOrder(std::vector<QueryShape> queries, size_t window, bool reorder, bool exact_only = true);
  // The next query (an index into the input) given the tree's state now; nullopt when none is left.
  std::optional<size_t> next(const KnowledgeTree* tree);
  // Tokens of path's longest prefix held by device or host memory in tree.
  static int64_t memory_cached_tokens(const KnowledgeTree& tree, const std::vector<std::string>& path);
  // Tokens of the root and of every chunk of path whose depth-1 node (its canonical cache) is held
  // by device or host memory, wherever the chunk is in the path.
  static int64_t memory_cached_chunk_tokens(const KnowledgeTree& tree, const std::vector<std::string>& path);
  // RAGCache §5.2: cached length / computation length (the computation at least one token).
  static double order_priority(int64_t cached, int64_t prompt_tokens);

 private:
  std::vector<QueryShape> queries_;
  std::vector<size_t> grouped_;  // input indices in grouped order, answered ones removed
  size_t window_;
  bool reorder_, exact_only_;
};

}  // namespace ragkv
