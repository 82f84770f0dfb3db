// precompute's chunk selection and variant sequences (core/rag/precompute-selection.h).
#include "core/rag/precompute-selection.h"

#include <algorithm>
#include <set>
#include <string>

#include "core/util/progress.h"

namespace ragkv {

std::vector<const Chunk*> chunks_used_by(const ContextRetriever& retriever, const std::vector<Query>& queries) {
  std::vector<const Chunk*> chunks;
  std::set<std::string> seen;
  Progress bar("precompute: select", int64_t(queries.size()), "queries");
  for (const Query& q : queries) {
    for (const Chunk* c : retriever.context_for(q).chunks)
      if (seen.insert(c->id).second) chunks.push_back(c);
    bar.add();
  }
  return chunks;
}

std::vector<std::vector<const Chunk*>> warmup_sequences(const ContextRetriever& retriever,
                                                        const std::vector<Query>& queries) {
  std::vector<std::vector<const Chunk*>> sequences;
  for (const Query& q : queries) sequences.push_back(retriever.context_for(q).chunks);
  return sequences;
}

std::vector<std::vector<const Chunk*>> neighbour_sequences(const IndexDir& index,
                                                           const std::vector<const Chunk*>& chunks, size_t n) {
  std::vector<std::vector<const Chunk*>> sequences;
  if (n == 0 || index.chunks().size() <= 1) return sequences;
  const size_t dim = index.manifest().dim;
  for (const Chunk* c : chunks) {
    const size_t row = size_t(c - index.chunks().data());
    const auto hits = index.search(index.embeddings().subspan(row * dim, dim), n + 1);
    std::vector<const Chunk*> seq;
    for (const Hit& h : hits)
      if (h.chunk != row && seq.size() < n) seq.push_back(&index.chunks()[h.chunk]);
    std::reverse(seq.begin(), seq.end());
    seq.push_back(c);
    sequences.push_back(std::move(seq));
  }
  return sequences;
}

}  // namespace ragkv
