// QueryOrder: whole-file grouping by chunk sequence, then OrderPriority within a window.
#include "core/rag/query-order.h"

#include <algorithm>
#include <numeric>

namespace ragkv {

QueryOrder::QueryOrder(std::vector<QueryShape> queries, size_t window, bool reorder, bool exact_only)
    : queries_(std::move(queries)), window_(window), reorder_(reorder), exact_only_(exact_only) {
  grouped_.resize(queries_.size());
  std::iota(grouped_.begin(), grouped_.end(), size_t(0));
  if (reorder_)
    std::stable_sort(grouped_.begin(), grouped_.end(),
                     [&](size_t a, size_t b) { return queries_[a].path < queries_[b].path; });
}

int64_t QueryOrder::memory_cached_tokens(const KnowledgeTree& tree, const std::vector<std::string>& path) {
  int64_t cached = 0;
  for (size_t i = 1; i <= path.size(); ++i) {
    const int n = tree.find(std::span<const std::string>(path.data(), i));
    if (n < 0) break;
    const TreeNode& node = tree.node(n);
    if (!node.live || !(node.in[size_t(KvTier::device)] || node.in[size_t(KvTier::host)])) break;
    cached += node.tokens;
  }
  return cached;
}

int64_t QueryOrder::memory_cached_chunk_tokens(const KnowledgeTree& tree, const std::vector<std::string>& path) {
  auto in_memory = [&](int n) {
    if (n < 0) return false;
    const TreeNode& node = tree.node(n);
    return node.live && (node.in[size_t(KvTier::device)] || node.in[size_t(KvTier::host)]);
  };
  if (path.empty()) return 0;
  const int root = tree.find(std::span<const std::string>(path.data(), 1));
  if (!in_memory(root)) return 0;
  int64_t cached = tree.node(root).tokens;
  for (size_t i = 1; i < path.size(); ++i) {
    const std::string pair[2] = {path[0], path[i]};
    const int n = tree.find(pair);
    if (in_memory(n)) cached += tree.node(n).tokens;
  }
  return cached;
}

double QueryOrder::order_priority(int64_t cached, int64_t prompt_tokens) {
  return double(cached) / double(std::max<int64_t>(1, prompt_tokens - cached));
}

std::optional<size_t> QueryOrder::next(const KnowledgeTree* tree) {
  if (grouped_.empty()) return std::nullopt;
  size_t best = 0;
  if (reorder_ && tree) {
    const size_t end = window_ == 0 ? grouped_.size() : std::min(window_, grouped_.size());
    double best_priority = -1;
    for (size_t i = 0; i < end; ++i) {
      const QueryShape& q = queries_[grouped_[i]];
      int64_t cached = memory_cached_tokens(*tree, q.path);
      if (!exact_only_) cached = std::max(cached, memory_cached_chunk_tokens(*tree, q.path));
      const double p = order_priority(cached, q.prompt_tokens);
      if (p > best_priority) {  // strictly: ties keep the grouped order
        best_priority = p;
        best = i;
      }
    }
  }
  const size_t chosen = grouped_[best];
  grouped_.erase(grouped_.begin() + std::ptrdiff_t(best));
  return chosen;
}

}  // namespace ragkv
