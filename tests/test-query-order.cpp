// The answering order of a batch (core/rag/query-order.h): whole-file grouping by chunk sequence,
// RAGCache §5.2's OrderPriority within the window against a knowledge tree, input order with
// --no-reorder; every query is given exactly once.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/kv/knowledge-tree.h"
#include "core/rag/query-order.h"

namespace {

using namespace ragkv;

QueryShape shape(std::vector<std::string> chunks, int64_t tokens = 1000) {
  QueryShape q;
  q.path = {"@prefix"};
  q.path.insert(q.path.end(), chunks.begin(), chunks.end());
  q.prompt_tokens = tokens;
  return q;
}

std::vector<size_t> drain(QueryOrder& o, const KnowledgeTree* t) {
  std::vector<size_t> out;
  while (auto n = o.next(t)) out.push_back(*n);
  return out;
}

// A tree whose host memory holds the nodes at `paths` (100 tokens each).
void hold(KnowledgeTree& t, const std::vector<std::vector<std::string>>& paths) {
  std::vector<NodeUse> uses;
  for (const auto& p : paths) uses.push_back({t.add(p, 100, 100), std::nullopt, 1.0});
  t.record_request(uses);
}

}  // namespace

TEST_CASE("query order: --no-reorder keeps the input order, grouping puts shared chunk prefixes together") {
  const std::vector<QueryShape> qs{shape({"b", "x"}), shape({"a", "y"}), shape({"b", "x"}), shape({"a", "y"}),
                                   shape({"a", "z"})};
  QueryOrder plain(qs, 0, false);
  CHECK(drain(plain, nullptr) == std::vector<size_t>{0, 1, 2, 3, 4});
  // Grouped (stable): a,y (1, 3), a,z (4), b,x (0, 2); no tree: no priority to break ties.
  QueryOrder grouped(qs, 0, true);
  CHECK(drain(grouped, nullptr) == std::vector<size_t>{1, 3, 4, 0, 2});
}

TEST_CASE("query order: the best-cached query of the window first, by cached over computation length") {
  CHECK(QueryOrder::order_priority(300, 1000) == doctest::Approx(300.0 / 700.0));
  CHECK(QueryOrder::order_priority(1000, 1000) == doctest::Approx(1000.0));  // computation at least 1 token
  KnowledgeTree t(CachePolicy::pgdsf, TierBudgets{{0, 1 << 20, 0}});
  hold(t, {{"@prefix"}, {"@prefix", "b"}, {"@prefix", "b", "x"}});
  CHECK(QueryOrder::memory_cached_tokens(t, shape({"b", "x"}).path) == 300);
  CHECK(QueryOrder::memory_cached_tokens(t, shape({"b", "y"}).path) == 200);
  CHECK(QueryOrder::memory_cached_tokens(t, shape({"a", "x"}).path) == 100);
  // Anywhere in the prompt, a chunk's canonical cache (depth 1) counts for the sparse modes only.
  CHECK(QueryOrder::memory_cached_tokens(t, shape({"a", "b"}).path) == 100);
  CHECK(QueryOrder::memory_cached_chunk_tokens(t, shape({"a", "b"}).path) == 200);
  QueryOrder sparse({shape({"a", "c"}), shape({"c", "b"})}, 0, true, /*exact_only=*/false);
  CHECK(drain(sparse, &t) == std::vector<size_t>{1, 0});  // c,b holds b in memory
  QueryOrder exact({shape({"a", "c"}), shape({"c", "b"})}, 0, true, /*exact_only=*/true);
  CHECK(drain(exact, &t) == std::vector<size_t>{0, 1});  // equal priority (the prefix): the grouped order
  const std::vector<QueryShape> qs{shape({"a", "x"}), shape({"b", "y"}), shape({"b", "x"}), shape({"c"})};
  // Whole file: b,x (300 cached) then b,y (200), then the grouped order.
  QueryOrder whole(qs, 0, true);
  CHECK(drain(whole, &t) == std::vector<size_t>{2, 1, 0, 3});
  // A window of 2 over the grouped order a,x; b,x; b,y; c: b,x beats a,x, then b,y enters and wins.
  QueryOrder window(qs, 2, true);
  CHECK(drain(window, &t) == std::vector<size_t>{2, 1, 0, 3});
  // A shorter prompt with the same cached length has less to compute: it goes first.
  const std::vector<QueryShape> sized{shape({"b", "x"}, 2000), shape({"b", "x"}, 500)};
  QueryOrder by_size(sized, 0, true);
  CHECK(drain(by_size, &t) == std::vector<size_t>{1, 0});
}
