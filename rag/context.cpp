// ContextRetriever: pinned passages by document id, or embed + HNSW top-k.
#include "rag/context.h"

#include <chrono>

#include "util/error.h"
#include "model/embedder.h"

namespace ragkv {

ContextRetriever::ContextRetriever(const IndexDir& index, Embedder* embedder, size_t top_k)
    : index_(index), embedder_(embedder), top_k_(top_k) {
  for (const Chunk& c : index.chunks()) chunks_of_doc_[c.doc].push_back(&c);
}

RagContext ContextRetriever::context_for(const Query& q) const {
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
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> e = embedder_->embed({q.question});
  for (const Hit& h : index_.search(e, top_k_)) ctx.chunks.push_back(&index_.chunks()[h.chunk]);
  ctx.retrieval_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return ctx;
}

}  // namespace ragkv
