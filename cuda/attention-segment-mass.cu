// Segment mass on tensor cores (issue 40 item 2: "the segment/key-mass pass … Cache-Craft
// need[s]"): seg_mass[(i · n_head + h) · n_seg + s] = Σ over key rows j in [seg_begin[s],
// seg_begin[s + 1]) of query row i / head h's softmax probability of key j — Cache-Craft's
// inter- and intra-chunk attention (§3.2, the variant statistics precompute and write-back
// collect on every layer of every row).
//
// As for key totals (attention-key-mass.cu): the tensor-core attention (attention-mma.cu) computes
// every row's output and leaves each vector's final (m, l); this kernel then walks the same
// blocks of 64 query vectors of one KV head over the key tiles they see (tile skipping by the
// tiles' position bounds, as there), recomputes S = Q·Kᵀ with the same code
// (mma_attention::warp_scores: the same logits), and sums p = exp(S − m) / l per segment. A block
// owns its vectors and visits the keys in row order, and segments are ascending row ranges, so
// each lane keeps one running sum per row for the segment it is in and stores it (no atomics:
// deterministic) when the walk leaves the segment; segments it never meets stay at the zero the
// launcher wrote. Per tile, the segments meeting it come from a binary search of seg_begin
// (block-uniform); a row's part of a segment in the tile is summed over the lane's keys, then
// over the quad of lanes that holds the row.
//
// Numerics: the tensor-core attention's own probabilities, each within a factor e^{±2Δ} of the
// exact one (Q rounded to f16), summed in f32; tests/attention-mass-f16-bound.h derives the bound
// per (row, head, segment) the GPU tests hold. The f32 kernel of attention.cu, with atomics,
// serves f32 K/V and RAGKV_CUDA_ATTENTION=f32.
#include "cuda/attention-segment-mass.cuh"
#include "cuda/attention-mma-common.cuh"
#include "cuda/attention-mma.cuh"
#include "cuda/attention-tiles.cuh"
#include "cuda/mma-fragments.h"
#include "cuda/mma-ops.cuh"

#include <cuda_fp16.h>

#include <climits>
#include <cstdint>

#include "cuda/cuda-check.h"

namespace ragkv {

namespace {

using mma_attention::kBlockVectors;
using mma_attention::kThreads;
using mma_attention::row_halves;

constexpr int kTileKeys = 64;  // keys per tile at every head_dim (no O accumulator here)

struct SegmentMassParams : mma_attention::QueryKeyParams {
  const int64_t* seg_begin;  // [n_seg + 1], ascending
  const float2* row_stats;   // each vector's (m, l), mma_attention::stats_index
  float* seg_mass;           // f32 [n_q][n_head][n_seg], zeroed
  int n_seg, n_head;
};

template <int D, int BN>
constexpr size_t smem_bytes() {
  return (size_t(kBlockVectors) + size_t(BN)) * row_halves<D>() * sizeof(__half) +
         (size_t(BN) + kBlockVectors) * sizeof(int);
}

template <int D, int BN>
__global__ void __launch_bounds__(kThreads) segment_mass_kernel(const SegmentMassParams p) {
  static_assert(D % 16 == 0 && BN % 16 == 0, "head_dim and the key tile in whole k-steps");
  constexpr int RS = row_halves<D>();
  constexpr int NT = BN / 8;  // n-tiles of S per warp

  extern __shared__ uint4 smem_u4[];
  __half* Qs = reinterpret_cast<__half*>(smem_u4);    // [64][RS]
  __half* Ks = Qs + kBlockVectors * RS;                // [BN][RS]
  int* kpos_s = reinterpret_cast<int*>(Ks + BN * RS);  // [BN]
  int* qpos_s = kpos_s + BN;                           // [64]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int g = blockIdx.y;
  const int64_t t0 = int64_t(blockIdx.x) * kBlockVectors;
  const int n_valid = int(min(int64_t(kBlockVectors), p.n_vec - t0));

  mma_attention::stage_query_vectors<D>(p, t0, n_valid, g, Qs, qpos_s);
  __syncthreads();
  int qmin, qmax;
  attention_tiles::query_position_range(qpos_s, n_valid, p.causal, lane, qmin, qmax);

  constexpr auto a_of = mma_fragments::a_row, k_of = mma_fragments::k_row;
  const __half* q_ld = Qs + (warp * 16 + a_of(lane).row) * RS + a_of(lane).col;
  const __half* k_ld = Ks + k_of(lane).row * RS + k_of(lane).col;
  const int r0 = warp * 16 + gid, r1 = r0 + 8;
  const bool warp_active = warp * 16 < n_valid;  // warp-uniform
  const int qp[2] = {qpos_s[r0], qpos_s[r1]};
  float m[2], l[2];  // l = 0: a row past the block or one that sees no key
  mma_attention::load_row_stats(p.row_stats, t0, r0, r1, n_valid, g, p.n_vec, m, l);

  // The running sums of this lane's two rows for segment `open` (quad-reduced: every lane of the
  // quad holds them; lane tig 0 stores).
  int open = -1;
  float acc[2] = {0.f, 0.f};
  const auto store_open = [&] {
    if (open < 0 || tig != 0) return;
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      const int vl = side == 0 ? r0 : r1;
      if (vl >= n_valid) continue;
      const int64_t t = t0 + vl, row = attention_tiles::vector_row(t, p.group);
      const int h = attention_tiles::vector_head(t, p.group, g);
      p.seg_mass[(row * p.n_head + h) * p.n_seg + open] = acc[side];
    }
  };

  const int64_t first_key = max(int64_t(0), __ldg(p.seg_begin)), end_key = min(p.n_kv, __ldg(p.seg_begin + p.n_seg));
  for (int64_t j0 = mma_attention::next_visible_tile<BN>(p, first_key / BN * BN, p.n_kv, lane, qmin, qmax); j0 < end_key;
       j0 = mma_attention::next_visible_tile<BN>(p, j0 + BN, p.n_kv, lane, qmin, qmax)) {
    __syncthreads();  // the previous tile's readers of Ks and kpos_s are done
    mma_attention::stage_key_rows<D, BN>(p, g, j0, Ks, kpos_s);
    __syncthreads();
    if (!warp_active) continue;  // warp-uniform; the next barrier is at the top of the loop

    float s[NT][4];
    mma_attention::warp_scores<D, NT>(s, q_ld, k_ld);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int side = e >> 1, col = nt * 8 + 2 * tig + (e & 1);
        s[nt][e] =
            mma_attention::final_probability(p, s[nt][e], j0 + col, qp[side], kpos_s[col], m[side], l[side]);
      }

    const int64_t j_last = min(j0 + BN, p.n_kv) - 1;
    const int sg_lo = max(0, attention_tiles::segment_of(p.seg_begin, p.n_seg, j0));
    const int sg_hi = min(p.n_seg - 1, attention_tiles::segment_of(p.seg_begin, p.n_seg, j_last));
    for (int sg = sg_lo; sg <= sg_hi; ++sg) {  // the same bounds in every lane: the shuffles see full quads
      const int64_t b0 = __ldg(p.seg_begin + sg), b1 = __ldg(p.seg_begin + sg + 1);
      float part[2] = {0.f, 0.f};
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = j0 + nt * 8 + 2 * tig + (e & 1);
          if (j >= b0 && j < b1) part[e >> 1] += s[nt][e];
        }
      if (sg != open) {
        store_open();
        open = sg;
        acc[0] = acc[1] = 0.f;
      }
      acc[0] += mma_ops::quad_sum(part[0]);
      acc[1] += mma_ops::quad_sum(part[1]);
    }
  }
  store_open();
}

template <int D, int BN>
void launch(const SegmentMassParams& p, int n_kv_head, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D, BN>();
  static_assert(smem <= 227 * 1024, "shared memory per block on sm_90");
  mma_attention::launch_blocks(segment_mass_kernel<D, BN>, smem, (p.n_vec + kBlockVectors - 1) / kBlockVectors,
                               n_kv_head, p, stream, "attention_mma_segment_mass_cuda: too many query vectors for one grid");
}

}  // namespace

size_t attention_segment_mass_work_bytes(const AttentionArgs& a) { return mma_attention::stats_bytes(a); }

void attention_mma_segment_mass_cuda(const AttentionArgs& a, cudaStream_t stream) {
  const mma_attention::StreamWorkspace work(a.mass_work, a.mass_work_bytes, attention_segment_mass_work_bytes(a), stream);
  auto* stats = reinterpret_cast<float2*>(work.bytes());

  attention_mma_cuda(a, stream, stats);  // every row's output, every vector's (m, l)

  SegmentMassParams p{};
  static_cast<mma_attention::QueryKeyParams&>(p) = mma_attention::query_key_params(a);
  p.seg_begin = a.seg_begin;
  p.row_stats = stats;
  p.seg_mass = a.seg_mass;
  p.n_seg = a.n_seg;
  p.n_head = a.n_head;
  if (p.n_vec > 0 && p.n_seg > 0) {
    switch (a.head_dim) {
      case 32: launch<32, kTileKeys>(p, a.n_kv_head, stream); break;
      case 64: launch<64, kTileKeys>(p, a.n_kv_head, stream); break;
      case 128: launch<128, kTileKeys>(p, a.n_kv_head, stream); break;
      default: launch<256, kTileKeys>(p, a.n_kv_head, stream); break;
    }
  }
}

}  // namespace ragkv
