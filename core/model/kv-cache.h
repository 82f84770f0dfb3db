// The KV buffer of one sequence: per layer K and V rows in f16 (DESIGN.md §4: one dtype in every
// mode), each row tagged with the absolute position its K was rotated to.
#pragma once
#include <cstdint>
#include <vector>

#include "core/backend/backend.h"
#include "core/model/model-config.h"

namespace ragkv {

struct KvCache {
  std::vector<Tensor> k;      // per layer: f16 [n_ctx][n_head_kv * head_dim], RoPE applied at pos
  std::vector<Tensor> v;      // per layer: f16 [n_ctx][n_head_kv * head_dim]
  std::vector<int32_t> pos;   // [n_ctx] absolute position of each row
  int64_t n_ctx = 0;          // capacity in rows
  int64_t n_used = 0;         // rows [0, n_used) hold valid K/V

  static KvCache create(Backend& backend, const ModelConfig& cfg, int64_t n_ctx) {
    KvCache kv;
    kv.n_ctx = n_ctx;
    kv.pos.assign(static_cast<size_t>(n_ctx), 0);
    for (int l = 0; l < cfg.n_layer; ++l) {
      kv.k.push_back(backend.alloc(DType::f16, n_ctx, cfg.kv_dim()));
      kv.v.push_back(backend.alloc(DType::f16, n_ctx, cfg.kv_dim()));
    }
    return kv;
  }
};

}  // namespace ragkv
