// QueryOrder: whole-file grouping by chunk sequence, then OrderPriority within a window.
#include "rag/query-order.h"

#include <algorithm>
#include <numeric>

namespace ragkv {

QueryOrder::QueryOrder(std::vector<QueryShape> queries, size_t window, bool reorder)
    : queries_(std::move(queries)), window_(window), reorder_(reorder) {
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
      const double p = order_priority(memory_cached_tokens(*tree, q.path), q.prompt_tokens);
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
