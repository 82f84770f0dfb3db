// What `precompute` computes: the chunks a query file uses, and the context sequences of
// Cache-Craft variants (warm-up queries' prompts, or each chunk after its nearest neighbours).
#pragma once
#include <cstddef>
#include <vector>

#include "core/rag/context.h"
#include "core/rag/queries.h"
#include "retrieval/index-dir.h"

namespace ragkv {

// The chunks the queries use (their passages, or their top-k), each once, in order of first use.
std::vector<const Chunk*> chunks_used_by(const ContextRetriever& retriever, const std::vector<Query>& queries);

// Each warm-up query's chunks as answer would retrieve them (DESIGN.md §4, Cache-Craft variants).
std::vector<std::vector<const Chunk*>> warmup_sequences(const ContextRetriever& retriever,
                                                        const std::vector<Query>& queries);

// FusionRAG's offline step: each chunk after its n most similar chunks in the index, most similar
// last (the chunk itself last of all). Empty when n is 0 or the index has one chunk.
std::vector<std::vector<const Chunk*>> neighbour_sequences(const IndexDir& index,
                                                           const std::vector<const Chunk*>& chunks, size_t n);

}  // namespace ragkv
