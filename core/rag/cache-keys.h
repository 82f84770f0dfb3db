// The store keys of one model and prompt format (DESIGN.md §4 "Chunk caches"): what a chunk
// cache's header must say for a prompt segment to use it — model fingerprint, shape, canonical
// prefix, chunk id and token ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/kv/kv-store.h"
#include "core/model/model.h"
#include "core/rag/prompt.h"

namespace ragkv {

class CacheKeys {
 public:
  CacheKeys(const Model& model, const PromptFormat& format);
  const std::string& model_fingerprint() const { return fp_; }
  KvStoreInfo store_info() const;
  ChunkKvMeta prefix() const;
  ChunkKvMeta chunk(const std::string& chunk_id, const std::vector<int32_t>& ids) const;
  // The key of a prompt segment: the prefix's, or its chunk's (the question has none).
  ChunkKvMeta segment(const PromptSegment& seg) const;
  // The donor cache of a chunk (core/rag/donor-reuse.h): its canonical key marked as a donor
  // cache; `donor` names the donor ("" when looking one up: any donor will do).
  ChunkKvMeta donor(const ChunkKvMeta& canonical, const std::string& donor = "") const;
  // The knowledge-tree node of a chunk segment computed exactly after `chain` (non-empty: the
  // chunk ids before it, in prompt order) at the segment's position (RAGCache §5.1).
  ChunkKvMeta chain_node(const PromptSegment& seg, const std::vector<std::string>& chain) const;

 private:
  const Model& model_;
  const PromptFormat& format_;
  std::string fp_;
};

}  // namespace ragkv
