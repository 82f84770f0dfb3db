// What the tensor-core attention kernels share (attention-mma.cu, attention-key-mass.cu): the
// block shape (4 warps, 16 query vectors each: one mma M per warp), the padded f16 row stride of
// their shared-memory tiles, the arguments they read, the query vectors staged as f16, and where
// a vector's softmax statistics go.
// Device code only: included from .cu files.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/attention-tiles.cuh"
#include "cuda/attention.cuh"
#include "cuda/mma-ops.cuh"

namespace ragkv::mma_attention {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockVectors = 16 * kWarps;  // query vectors per block (16 per warp: one mma M)

// f16 rows padded by 8 halves: a row stride of D/2 + 4 words puts the 8 rows × 4 columns of a
// fragment load on 32 distinct banks.
template <int D>
constexpr int row_halves() { return D + 8; }

// Vectors [t0, t0 + n_valid) of KV head g as f16 rows of Qs ([kBlockVectors][row_halves<D>]),
// zeros past n_valid; every thread of the block takes part.
template <int D>
__device__ __forceinline__ void stage_query_vectors(const float* __restrict__ q, int64_t t0, int n_valid, int group,
                                                    int g, int64_t q_cols, __half* Qs) {
  for (int idx = threadIdx.x; idx < kBlockVectors * (D / 4); idx += kThreads) {
    const int vl = idx / (D / 4), c = (idx % (D / 4)) * 4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (vl < n_valid)
      val = *reinterpret_cast<const float4*>(q + attention_tiles::vector_offset(t0 + vl, group, g, q_cols, D) + c);
    __half2* dst = reinterpret_cast<__half2*>(Qs + vl * row_halves<D>() + c);
    dst[0] = __floats2half2_rn(val.x, val.y);
    dst[1] = __floats2half2_rn(val.z, val.w);
  }
}

// The arguments both kernels read, from a checked call (attention.cuh).
struct QueryKeyParams {
  const float* q;        // f32 [n_q][q_cols]
  const int32_t* q_pos;  // [n_q] (causal)
  const __half* k;       // f16 [>= n_kv][kv_cols]
  const int32_t* k_pos;  // [n_kv] (causal)
  int64_t n_kv, n_vec, q_cols, kv_cols;  // n_vec = n_q · group query vectors per KV head
  int group, window;
  float scale, softcap;
  bool causal;
};

inline QueryKeyParams query_key_params(const AttentionArgs& a) {
  QueryKeyParams p{};
  p.group = a.n_head / a.n_kv_head;
  p.q = a.q;
  p.q_pos = a.q_pos;
  p.k = static_cast<const __half*>(a.k);
  p.k_pos = a.k_pos;
  p.n_kv = a.n_kv;
  p.n_vec = a.n_q * p.group;
  p.q_cols = int64_t(a.n_head) * a.head_dim;
  p.kv_cols = int64_t(a.n_kv_head) * a.head_dim;
  p.window = a.causal ? a.sliding_window : 0;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.causal = a.causal;
  return p;
}

// S = Q·Kᵀ for a warp's 16 query vectors × NT·8 keys: D/16 k-steps × NT mma each, A from the
// f16 Q rows (q_ld: this lane's ldmatrix row of the warp's 16), B straight from the K rows (Kᵀ's
// columns are K's rows, so the "col" operand is a row of K; k_ld: this lane's ldmatrix row of the
// tile), each fragment set loaded by one ldmatrix (mma-fragments.h: A per k-step, B per pair of
// n-tiles). Row strides row_halves<D>(). C layout: s[nt] holds rows groupID and groupID + 8,
// keys nt·8 + 2·tig and + 1.
template <int D, int NT>
__device__ __forceinline__ void warp_scores(float (&s)[NT][4], const __half* q_ld, const __half* k_ld) {
  static_assert(D % 16 == 0 && NT % 2 == 0, "whole k-steps, n-tiles in pairs");
  constexpr int RS = row_halves<D>();
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D; kk += 16) {
    uint32_t a[4];
    mma_ops::ldmatrix_x4(a, q_ld + kk);
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {  // two n-tiles (16 keys) per ldmatrix
      uint32_t b[4];
      mma_ops::ldmatrix_x4(b, k_ld + nt * 8 * RS + kk);
      mma_ops::mma_16816(s[nt], a, b[0], b[1]);
      mma_ops::mma_16816(s[nt + 1], a, b[2], b[3]);
    }
  }
}

// Vector t of KV head g's final softmax statistics (m: the largest logit it sees, −∞ when none;
// l: Σ exp(logit − m)) in a [n_kv_head][n_vec] array of float2.
__device__ __forceinline__ int64_t stats_index(int64_t t, int g, int64_t n_vec) { return int64_t(g) * n_vec + t; }

}  // namespace ragkv::mma_attention
