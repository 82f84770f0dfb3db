// Causal prompt attention on the CPU over K/V rows whose positions ascend (every prefill and every
// selective recompute): tiles of kAttnTile keys, an online softmax per query row, f32 register
// tiles from the kernel table, threads over (query head, block of query rows).
#pragma once
#include <cstdint>
#include <span>

#include "core/backend/backend.h"

namespace ragkv {

struct QuantKernels;

// q: [n_q][n_head · hd] f32 at q_pos; k, v: [≥ n_kv][n_kv_head · hd] f16 or f32 at k_pos (ascending);
// out: [n_q][n_head · hd] f32. A query sees the keys at positions ≤ its own (and inside the sliding
// window); one that sees none gets zeros. Each query row's output depends only on its own row and
// the keys it sees — the same bits whatever other rows are in the call, however many threads run.
void attention_tiled(const QuantKernels& kernels, const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k,
                     const Tensor& v, std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                     const Tensor& out, int threads);

}  // namespace ragkv
