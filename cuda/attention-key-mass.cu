// Key totals on tensor cores (issue 40 item 5: prophet's question pass at the cost of what it
// computes): key_mass[j] = Σ over the query vectors of rows [first_row, n_q) of their softmax
// probability of key row j — ProphetKV's question attention per key (SegmentMass::key_totals).
//
// A probability needs the row's final max m and sum l, so the totals are a second pass (as in
// attention.cu's f32 kernel): the tensor-core attention (attention-mma.cu) computes every row's
// output and leaves each vector's (m, l); then this kernel recomputes S = Q·Kᵀ with the same code
// (mma_attention::warp_scores: the same f16 Q rows, K rows and k-step order; the scale applied
// by __fmul_rn on both sides, never contracted into the exponent's subtraction — the same logits,
// unless the tensor cores' f32 sums depend on an element's row slot, which the bound covers
// anyway) and sums p = exp(S − m) / l over the vectors. A layer's own attention can thus yield the
// question's totals (first_row > 0: only the question's rows count) without a second attention of
// the question's rows, and the pass itself runs on tensor cores. Before, prophet's first pass ran
// the question's rows a second time per layer on the f32 kernel, two FMA passes over every key
// (my estimate, not measured: 2–8 ms of an 8B blend). A layer call of at most 8 query vectors per
// KV head (a one- or two-token question alone) that went to split-K without mass now runs on the
// tensor-core kernel, split over key ranges (attention-mma.cu, key_splits): its output moves
// within the f16 bound.
//
// Work split: a block of 4 warps owns one tile of BN keys of one KV head (grid ⌈n_kv / BN⌉ ×
// n_kv_head) and stages it once; it then walks the vectors in chunks of 64 (16 per warp, one mma
// M), skipping a chunk none of whose queries sees the tile (positions, block-uniform). Each lane
// keeps its share of the tile's column sums in registers across chunks; at the end they are
// reduced over the 8 row groups of the warp (xor shuffles), over the 4 warps in shared memory in a
// fixed order, and written to a per-KV-head partial row; a last kernel adds the n_kv_head partials
// per key in head order. No atomics: the totals are deterministic.
//
// Numerics: the probabilities are the tensor-core attention's own (same logits, same m and l),
// which differ from the f32 CPU reference's by Q's rounding to f16 — each probability within a
// factor e^{±2Δ} of it (Δ the logit error bound of tests/attention-f16-bound.h) — plus f32
// rounding of the sums; tests/attention-mass-f16-bound.h derives the per-key bound the GPU tests hold.
#include "cuda/attention-key-mass.cuh"
#include "cuda/attention-mma-common.cuh"
#include "cuda/attention-mma.cuh"
#include "cuda/attention-tiles.cuh"
#include "cuda/mma-fragments.h"

#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "cuda/cuda-check.h"

namespace ragkv {

namespace {

using mma_attention::kBlockVectors;
using mma_attention::kThreads;
using mma_attention::kWarps;
using mma_attention::row_halves;

// Keys per block: 64 at every head_dim (no O accumulator here to bound registers by).
constexpr int kTileKeys = 64;

struct KeyMassParams : mma_attention::QueryKeyParams {
  const float2* row_stats;  // each vector's (m, l), mma_attention::stats_index
  float* partial;           // [n_kv_head][n_kv]: each KV head's totals
  int64_t vec_begin;        // the totals count vectors [vec_begin, n_vec)
};

template <int D, int BN>
constexpr size_t smem_bytes() {
  return (size_t(kBlockVectors) + size_t(BN)) * row_halves<D>() * sizeof(__half) +
         (size_t(BN) + kBlockVectors) * sizeof(int) + size_t(kWarps) * BN * sizeof(float);
}

template <int D, int BN>
__global__ void __launch_bounds__(kThreads) key_mass_kernel(const KeyMassParams p) {
  static_assert(D % 16 == 0 && BN % 16 == 0 && BN <= 64, "head_dim and the key tile in whole k-steps");
  constexpr int RS = row_halves<D>();
  constexpr int NT = BN / 8;  // n-tiles of S per warp

  extern __shared__ uint4 smem_u4[];
  __half* Qs = reinterpret_cast<__half*>(smem_u4);     // [64][RS]
  __half* Ks = Qs + kBlockVectors * RS;                 // [BN][RS]
  int* kpos_s = reinterpret_cast<int*>(Ks + BN * RS);   // [BN]
  int* qpos_s = kpos_s + BN;                            // [64]
  float* colsum = reinterpret_cast<float*>(qpos_s + kBlockVectors);  // [kWarps][BN]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int g = blockIdx.y;
  const int64_t j0 = int64_t(blockIdx.x) * BN;

  mma_attention::stage_key_rows<D, BN>(p, g, j0, Ks, kpos_s);
  __syncthreads();
  // The tile's position range (every warp computes the same).
  int kmin = INT_MAX, kmax = INT_MIN;
  for (int i = lane; i < BN; i += 32)
    if (j0 + i < p.n_kv) kmin = min(kmin, kpos_s[i]), kmax = max(kmax, kpos_s[i]);
  kmin = __reduce_min_sync(0xffffffffu, kmin);
  kmax = __reduce_max_sync(0xffffffffu, kmax);

  constexpr auto a_of = mma_fragments::a_row, k_of = mma_fragments::k_row;
  const __half* q_ld = Qs + (warp * 16 + a_of(lane).row) * RS + a_of(lane).col;
  const __half* k_ld = Ks + k_of(lane).row * RS + k_of(lane).col;
  const int r0 = warp * 16 + gid, r1 = r0 + 8;

  float acc[NT][2];  // this lane's share of the totals of keys nt·8 + 2·tig and + 1
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = 0.f;

  for (int64_t t0 = p.vec_begin; t0 < p.n_vec; t0 += kBlockVectors) {
    const int n_valid = int(min(int64_t(kBlockVectors), p.n_vec - t0));
    __syncthreads();  // the previous chunk's readers of Qs and qpos_s are done
    mma_attention::stage_query_vectors<D>(p, t0, n_valid, g, Qs, qpos_s);
    __syncthreads();
    int qmin, qmax;
    attention_tiles::query_position_range(qpos_s, n_valid, p.causal, lane, qmin, qmax);
    if (p.causal && (kmin > qmax || (p.window > 0 && int64_t(kmax) <= int64_t(qmin) - p.window))) continue;
    if (warp * 16 >= n_valid) continue;  // warp-uniform: no barrier before the next chunk's first

    // S = Q·Kᵀ by the code attention-mma.cu computes it with: the same logits.
    float s[NT][4];
    mma_attention::warp_scores<D, NT>(s, q_ld, k_ld);

    // p = exp(S − m) / l for this lane's two rows (0 for a row past the chunk or one that sees
    // no key: l = 0).
    float m[2], l[2];
    mma_attention::load_row_stats(p.row_stats, t0, r0, r1, n_valid, g, p.n_vec, m, l);
    const int qp[2] = {qpos_s[r0], qpos_s[r1]};
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int side = e >> 1, col = nt * 8 + 2 * tig + (e & 1);
        acc[nt][e & 1] +=
            mma_attention::final_probability(p, s[nt][e], j0 + col, qp[side], kpos_s[col], m[side], l[side]);
      }
    }
  }

  // Σ over the warp's 8 row groups (lanes of one tig hold the same keys), then over the warps.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      float v = acc[nt][b];
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (gid == 0) colsum[warp * BN + nt * 8 + 2 * tig + b] = v;
    }
  __syncthreads();
  if (tid < BN && j0 + tid < p.n_kv) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += colsum[w * BN + tid];
    p.partial[int64_t(g) * p.n_kv + j0 + tid] = total;
  }
}

// key_mass[j] = Σ_g partial[g][j], heads in order.
__global__ void sum_heads_kernel(const float* __restrict__ partial, float* __restrict__ key_mass, int64_t n_kv,
                                 int n_kv_head) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n_kv) return;
  float total = 0.f;
  for (int g = 0; g < n_kv_head; ++g) total += partial[int64_t(g) * n_kv + j];
  key_mass[j] = total;
}

template <int D, int BN>
void launch(const KeyMassParams& p, int n_kv_head, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D, BN>();
  static_assert(smem <= 227 * 1024, "shared memory per block on sm_90");
  mma_attention::launch_blocks(key_mass_kernel<D, BN>, smem, (p.n_kv + BN - 1) / BN, n_kv_head, p, stream,
                               "attention_mma_key_mass_cuda: too many keys for one grid");
}

}  // namespace

size_t attention_key_mass_work_bytes(const AttentionArgs& a) {
  return mma_attention::stats_bytes(a) + size_t(a.n_kv_head) * size_t(a.n_kv) * sizeof(float);
}

void attention_mma_key_mass_cuda(const AttentionArgs& a, cudaStream_t stream) {
  const mma_attention::StreamWorkspace work(a.mass_work, a.mass_work_bytes, attention_key_mass_work_bytes(a), stream);
  auto* stats = reinterpret_cast<float2*>(work.bytes());
  auto* partial = reinterpret_cast<float*>(work.bytes() + mma_attention::stats_bytes(a));

  attention_mma_cuda(a, stream, stats);  // every row's output, every vector's (m, l)

  KeyMassParams p{};
  static_cast<mma_attention::QueryKeyParams&>(p) = mma_attention::query_key_params(a);
  p.row_stats = stats;
  p.partial = partial;
  p.vec_begin = a.key_mass_first_row * p.group;
  switch (a.head_dim) {
    case 32: launch<32, kTileKeys>(p, a.n_kv_head, stream); break;
    case 64: launch<64, kTileKeys>(p, a.n_kv_head, stream); break;
    case 128: launch<128, kTileKeys>(p, a.n_kv_head, stream); break;
    default: launch<256, kTileKeys>(p, a.n_kv_head, stream); break;
  }
  constexpr int kSumThreads = 256;
  const int64_t blocks = (a.n_kv + kSumThreads - 1) / kSumThreads;
  sum_heads_kernel<<<unsigned(blocks), kSumThreads, 0, stream>>>(partial, a.key_mass, a.n_kv, a.n_kv_head);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
