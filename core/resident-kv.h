// A chunk's KV held in the backend's memory — on CUDA, in device memory: RAGCache §4's GPU tier.
// Every layer is read and verified from its file once; each prompt that reuses the chunk then
// copies it on the device (Backend::copy) instead of loading it from the host.
#pragma once
#include <memory>
#include <vector>

#include "core/backend.h"
#include "core/kv-store.h"

namespace ragkv {

struct ResidentChunkKv {
  std::vector<Tensor> k, v;  // per layer f16 [n_tokens][kv_dim], as stored (K at first_pos)

  // CacheFileError as ChunkKvReader::read_layer for a layer that fails its checks.
  static std::shared_ptr<const ResidentChunkKv> load(Backend& backend, const ChunkKvReader& file);
  size_t bytes() const;
};

}  // namespace ragkv
