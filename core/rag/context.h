// The chunks a question is answered over (DESIGN.md §1 `answer`): the query's own "passages"
// (document ids; every chunk of each document, in order — this pins the context as in the
// papers' evaluations), or the top-k chunks of an HNSW search on the question's embedding.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/rag/queries.h"
#include "retrieval/index-dir.h"
#include "core/util/turn-lock.h"

namespace ragkv {

class Embedder;

struct RagContext {
  std::vector<const Chunk*> chunks;  // in prompt order
  double retrieval_ms = 0;           // embedding + search (0 for pinned passages)
  double embed_ms = 0, search_ms = 0;  // its two parts
  double on_change_ms = 0;             // in SearchOptions::on_change (not part of search_ms)
  bool pinned = false;
};

// How a search runs (the result is the same either way).
struct SearchOptions {
  // > 0: a staged search (RAGCache §5.3) in slices of this many distance computations, with
  // on_change called with each changed complete top-k (the final one last).
  size_t slice = 0;
  std::function<void(const std::vector<const Chunk*>&)> on_change;
  // Held while embedding: the embedder shares its backend with a thread that computes on it.
  TurnLock* backend_turn = nullptr;
};

class ContextRetriever {
 public:
  // embedder may be null when every query pins its passages; it must match the index.
  ContextRetriever(const IndexDir& index, Embedder* embedder, size_t top_k);
  // Error "FILE:LINE: passage 'X' is not in the index INDEX" for an unknown passage id, and
  // "FILE:LINE: …needs --embedder" when a query must be searched but no embedder was given.
  RagContext context_for(const Query& q) const { return context_for(q, SearchOptions{}); }
  RagContext context_for(const Query& q, const SearchOptions& opt) const;

 private:
  const IndexDir& index_;
  Embedder* embedder_;
  size_t top_k_;
  std::map<std::string, std::vector<const Chunk*>> chunks_of_doc_;
};

}  // namespace ragkv
