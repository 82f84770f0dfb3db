// ContextRetriever: pinned passages by document id, or embed + HNSW top-k.
#include "core/rag/context.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>

#include "core/util/error.h"
#include "core/model/embedder.h"
#include "retrieval/staged-metrics.h"

namespace ragkv {

ContextRetriever::ContextRetriever(const IndexDir& index, Embedder* embedder, size_t top_k)
    : index_(index), embedder_(embedder), top_k_(top_k) {
  for (const Chunk& c : index.chunks()) chunks_of_doc_[c.doc].push_back(&c);
}

RagContext ContextRetriever::context_for(const Query& q, const SearchOptions& opt) const {
  RagContext ctx;
  if (!q.passages.empty()) {
    ctx.pinned = true;
    for (const std::string& doc : q.passages) {
      const auto it = chunks_of_doc_.find(doc);
      if (it == chunks_of_doc_.end())
        fail("{}:{}: passage '{}' is not in the index", q.source, q.line, doc);
      ctx.chunks.insert(ctx.chunks.end(), it->second.begin(), it->second.end());
    }
    return ctx;
  }
  if (!embedder_) fail("{}:{}: query '{}' has no passages and no embedder was loaded to search", q.source, q.line, q.id);
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  std::optional<std::unique_lock<TurnLock>> turn;
  if (opt.backend_turn) turn.emplace(*opt.backend_turn);
  const auto t0 = Clock::now();
  const std::vector<float> e = embedder_->embed({q.question});
  const auto t1 = Clock::now();
  turn.reset();
  auto chunks_of = [&](const std::vector<Hit>& hits) {
    std::vector<const Chunk*> out;
    for (const Hit& h : hits) out.push_back(&index_.chunks()[h.chunk]);
    return out;
  };
  if (opt.slice == 0) {
    ctx.chunks = chunks_of(index_.search(e, top_k_));
  } else {
    StagedSearch s = index_.staged_search(e, top_k_);
    const size_t complete = std::min(top_k_, index_.chunks().size());
    ctx.chunks = chunks_of(run_staged_search(s, opt.slice, complete, [&](const std::vector<Hit>& top) {
      if (!opt.on_change) return;
      const auto c0 = Clock::now();
      opt.on_change(chunks_of(top));
      ctx.on_change_ms += ms(c0, Clock::now());
    }));
  }
  const auto t2 = Clock::now();
  ctx.embed_ms = ms(t0, t1);
  ctx.search_ms = ms(t1, t2) - ctx.on_change_ms;
  ctx.retrieval_ms = ctx.embed_ms + ctx.search_ms;
  return ctx;
}

}  // namespace ragkv
