// CacheKeys: store.json's info and chunk-cache headers for one model and prompt format.
#include "core/rag/cache-keys.h"

#include <filesystem>

#include "core/model/model-fingerprint.h"
#include "core/util/error.h"

namespace ragkv {

CacheKeys::CacheKeys(const Model& model, const PromptFormat& format)
    : model_(model), format_(format), fp_(ragkv::model_fingerprint(model.gguf())) {}

KvStoreInfo CacheKeys::store_info() const {
  const ModelConfig& c = model_.config();
  KvStoreInfo info;
  info.model_fingerprint = fp_;
  info.model_name = std::filesystem::path(model_.gguf().path()).filename().string();
  info.n_layer = uint32_t(c.n_layer);
  info.n_kv_head = uint32_t(c.n_head_kv);
  info.head_dim = uint32_t(c.head_dim);
  info.prefix = format_.prefix_description();
  return info;
}

ChunkKvMeta CacheKeys::prefix() const {
  ChunkKvMeta m = chunk(kPrefixChunkId, format_.prefix_ids());
  m.first_pos = 0;
  return m;
}

ChunkKvMeta CacheKeys::donor(const ChunkKvMeta& canonical, const std::string& donor) const {
  ChunkKvMeta m = canonical;
  m.donor = donor.empty() ? "*" : donor;
  return m;
}

ChunkKvMeta CacheKeys::chunk(const std::string& chunk_id, const std::vector<int32_t>& ids) const {
  const ModelConfig& c = model_.config();
  ChunkKvMeta m;
  m.model_fingerprint = fp_;
  m.chunk_id = chunk_id;
  m.prefix = format_.prefix_description();
  m.n_layer = uint32_t(c.n_layer);
  m.n_kv_head = uint32_t(c.n_head_kv);
  m.head_dim = uint32_t(c.head_dim);
  m.n_tokens = uint32_t(ids.size());
  m.token_hash = token_ids_hash(ids);
  m.first_pos = int32_t(format_.prefix_ids().size());
  return m;
}

ChunkKvMeta CacheKeys::segment(const PromptSegment& seg) const {
  switch (seg.kind) {
    case PromptSegment::Kind::prefix: return prefix();
    case PromptSegment::Kind::chunk: return chunk(seg.chunk_id, seg.ids);
    case PromptSegment::Kind::turn:
    case PromptSegment::Kind::suffix: break;
  }
  fail("internal: the question and the conversation's turns have no cache key");
}

ChunkKvMeta CacheKeys::chain_node(const PromptSegment& seg, const std::vector<std::string>& chain) const {
  if (seg.kind != PromptSegment::Kind::chunk || chain.empty())
    fail("internal: a knowledge-tree node is a chunk after a non-empty chain");
  ChunkKvMeta m = chunk(seg.chunk_id, seg.ids);
  m.context = chain;
  m.exact_chain = true;
  m.first_pos = int32_t(seg.begin);
  return m;
}

}  // namespace ragkv
