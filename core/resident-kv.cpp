// ResidentChunkKv: one chunk file's layers uploaded to the backend, verified on the way.
#include "core/resident-kv.h"

namespace ragkv {

std::shared_ptr<const ResidentChunkKv> ResidentChunkKv::load(Backend& backend, const ChunkKvReader& file) {
  const ChunkKvMeta& m = file.meta();
  auto r = std::make_shared<ResidentChunkKv>();
  std::vector<uint16_t> layer(file.layer_bytes() / sizeof(uint16_t));
  const size_t half = layer.size() / 2;
  for (uint32_t l = 0; l < m.n_layer; ++l) {
    file.read_layer(int(l), layer.data(), layer.data() + half);
    r->k.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    r->v.push_back(backend.alloc(DType::f16, m.n_tokens, m.kv_dim()));
    backend.upload(r->k.back(), layer.data());
    backend.upload(r->v.back(), layer.data() + half);
  }
  return r;
}

size_t ResidentChunkKv::bytes() const {
  size_t b = 0;
  for (size_t l = 0; l < k.size(); ++l) b += k[l].bytes() + v[l].bytes();
  return b;
}

}  // namespace ragkv
