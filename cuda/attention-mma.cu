// Tensor-core attention (issue 40 item 2): the FlashAttention-2 forward loop (Dao 2023, Alg. 1:
// one pass over K/V tiles, the online softmax kept per query row in registers, O rescaled in
// registers, divided by l once at the end) on mma.sync.m16n8k16 tiles — f16 operands, f32
// accumulators — with attention.cu's semantics: queries at arbitrary absolute positions, key
// rows in any position order, masks decided per (query, key) pair by position and window,
// softcap, tile skipping by the block's position ranges. For key totals and segment mass it also
// leaves each vector's final (m, l), which the passes of attention-key-mass.cu and
// attention-segment-mass.cu read.
//
// Work split. Vectors as in attention.cu (vector t = row · group + hg of KV head g). A block of 4
// warps owns 64 consecutive vectors of one KV head, 16 per warp (the M of one mma); grid
// ⌈n_vec / 64⌉ × n_kv_head. Per tile of BN keys (64; 32 for head_dim 256, to bound registers):
//   1. the block stages K and V rows [j0, j0 + BN) of head g as f16 (the cache's own values, no
//      conversion) and their positions in shared memory, by cp.async, one tile ahead: the next
//      visible tile's K is copied during this tile's softmax and P·V, its V during its own S;
//   2. each warp computes S = Q·Kᵀ for its 16 vectors × BN keys: D/16 k-steps × BN/8 mma each,
//      A from the f16 Q rows staged once per block, B straight from the K rows (Kᵀ's columns are
//      K's rows, so the "col" operand is a row of K), each fragment set loaded by one ldmatrix
//      (mma-fragments.h: A per k-step, B per pair of n-tiles);
//   3. scale, softcap, mask (−∞ past n_kv or invisible), online softmax on the accumulator
//      registers: a lane holds two rows (groupID, groupID + 8), the row max and sum reduced over
//      the lane quad with two xor shuffles; O's registers rescaled by α;
//   4. O += P·V: P's accumulator registers repacked as f16 pairs are exactly the A fragments of
//      the next mma (the m16n8 C layout equals the m16n8k16 A layout, two n-tiles per k-step); V
//      read from shared memory as B by ldmatrix .trans (a key pair per register, two n-tiles of
//      head dims per load).
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// groupID = lane / 4, tig = lane % 4: A element pairs at (row groupID or +8, cols 2·tig (+8));
// B pairs at (k = 2·tig (+8), n = groupID); C at (row groupID or +8, cols 2·tig, 2·tig + 1).
//
// Split keys (flash-decoding, Dao et al. 2023, for the tensor-core loop): a call whose blocks would
// not fill the GPU — a short question or a few recompute rows over a long prompt: 40 rows of an 8B
// layer are 24 blocks on 132 SMs, each walking every key — is split into up to kMaxKeySplits ranges
// of whole tiles (grid z); each block walks its range as above and leaves its unnormalised O and
// (m, l), and combine_kernel merges the ranges (M = max m, L = Σ l·e^{m − M}, O = Σ O·e^{m − M},
// out = O / L) and writes the statistics the mass passes read. Compiled apart (kSplit), so that
// the unsplit kernel keeps its registers.
//
// Shared memory (f16 rows padded by 8 halves: a row stride of D/2 + 4 words puts the 8 rows × 4
// columns of a fragment load on 32 distinct banks): Q [64][D + 8], K and V [BN][D + 8], positions
// (the tile's and the next one's).
// D = 128: 52 KiB; D = 256 (BN 32): 66.5 KiB; the launcher sets each kernel's limit to its size.
//
// Numerics against the f32 CPU reference: Q is rounded to f16 (K and V are f16 already, the
// same values on both sides); products are exact and summed in f32; P = exp(S − m) is rounded to
// f16 before P·V while l sums the unrounded f32 values. A logit thus moves by at most
// scale · u · Σ_d |q_d k_d| (u = 2⁻¹¹, plus f32 summation), and an output by about
// (2·max logit error + u) · max |v| — the bound tests/test-cuda-attention.cpp derives per query
// from the data and holds the kernel to, as llama.cpp's test-backend-ops normalises errors per op.
#include "cuda/attention-mma.cuh"
#include "cuda/attention-mma-common.cuh"
#include "cuda/attention-tiles.cuh"
#include "cuda/key-tile-bounds.h"
#include "cuda/mma-fragments.h"
#include "cuda/mma-ops.cuh"

#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/cuda-check.h"

namespace ragkv {

namespace {

using namespace mma_ops;
using mma_attention::kBlockVectors;
using mma_attention::kThreads;
using mma_attention::row_halves;

struct MmaParams : mma_attention::QueryKeyParams {
  const __half* v;               // as k
  float* out;                    // f32 [n_q][q_cols]
  float2* row_stats;             // null, or each vector's final (m, l) (mma_attention::stats_index)
  // Split keys (grid z > 1): block z walks keys [z · split_keys, (z + 1) · split_keys) and leaves
  // its unnormalised O and its (m, l) in part_o / part_ml (split_index) for combine_kernel;
  // unsplit: part_o null, split_keys ≥ n_kv.
  int64_t split_keys;
  float* part_o;     // [splits][n_kv_head][n_vec][D]
  float2* part_ml;   // [splits][n_kv_head][n_vec]
};

// Where vector t of KV head g's partial sums over key range z go.
__device__ __forceinline__ int64_t split_index(int z, int g, int n_kv_head, int64_t t, int64_t n_vec) {
  return (int64_t(z) * n_kv_head + g) * n_vec + t;
}

template <int D, int BN>
constexpr size_t smem_bytes() {
  return (size_t(kBlockVectors) + 2 * size_t(BN)) * row_halves<D>() * sizeof(__half) +
         (2 * size_t(BN) + kBlockVectors) * sizeof(int);
}

__device__ __forceinline__ bool key_visible(const MmaParams& p, int qp, int kp) {
  return attention_tiles::key_visible(qp, kp, p.window);
}

// Starts copying rows [j0, j0 + BN) of KV head g to shared memory as they are (f16), 16 bytes per
// copy; rows past n_kv become zeros.
template <int D, int BN>
__device__ __forceinline__ void stage_rows_async(const __half* __restrict__ src, const MmaParams& p, int g,
                                                 int64_t j0, __half* dst) {
  constexpr int kPerRow = D / 8;
  for (int idx = threadIdx.x; idx < BN * kPerRow; idx += kThreads) {
    const int r = idx / kPerRow, c = (idx % kPerRow) * 8;
    const int64_t j = j0 + r;
    const bool valid = j < p.n_kv;
    cp_async_16(dst + r * row_halves<D>() + c, valid ? src + j * p.kv_cols + int64_t(g) * D + c : src, valid);
  }
}

// kSplit: the block walks its key range of a split (blockIdx.z) and leaves partial sums; compiled
// apart so that the unsplit kernel keeps its registers (168 at head_dim 128: 3 blocks per SM).
template <int D, int BN, bool kSplit>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(const MmaParams p) {
  static_assert(D % 16 == 0 && BN % 16 == 0, "head_dim and the key tile in whole k-steps");
  constexpr int RS = row_halves<D>();
  constexpr int NT = BN / 8;  // n-tiles of S per warp
  constexpr int DT = D / 8;   // n-tiles of O per warp

  extern __shared__ uint4 smem_u4[];
  __half* Qs = reinterpret_cast<__half*>(smem_u4);  // [64][RS]
  __half* Ks = Qs + kBlockVectors * RS;              // [BN][RS]
  __half* Vs = Ks + BN * RS;                         // [BN][RS]
  int* kpos_buf = reinterpret_cast<int*>(Vs + BN * RS);  // [2][BN]: the tile's, the next one's
  int* qpos_s = kpos_buf + 2 * BN;                         // [64]

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
  const int g = blockIdx.y;
  const int64_t t0 = int64_t(blockIdx.x) * kBlockVectors;
  const int n_valid = int(min(int64_t(kBlockVectors), p.n_vec - t0));

  // The block's query vectors as f16 (zeros past n_vec), and their positions.
  mma_attention::stage_query_vectors<D>(p, t0, n_valid, g, Qs, qpos_s);
  __syncthreads();

  int qmin, qmax;
  attention_tiles::query_position_range(qpos_s, n_valid, p.causal, lane, qmin, qmax);

  // This lane's two rows of the warp's 16 vectors (C fragments), and the shared-memory rows it
  // hands to ldmatrix for the A fragments of Q, the B fragments of K and those of V.
  const int r0 = warp * 16 + gid, r1 = r0 + 8;
  const int qp0 = qpos_s[r0], qp1 = qpos_s[r1];
  constexpr auto a_of = mma_fragments::a_row, k_of = mma_fragments::k_row, v_of = mma_fragments::v_row;
  const __half* q_ld = Qs + (warp * 16 + a_of(lane).row) * RS + a_of(lane).col;
  const __half* k_ld = Ks + k_of(lane).row * RS + k_of(lane).col;
  const __half* v_ld = Vs + v_of(lane).row * RS + v_of(lane).col;

  float o[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.f;
  float m0 = -CUDART_INF_F, m1 = -CUDART_INF_F, l0 = 0.f, l1 = 0.f;  // l: this lane's share of the row sum

  // The K/V pipeline (cp.async, FlashAttention-2's prefetch): tile j's K and V are requested as two
  // groups; the next visible tile's K (and positions) is requested once every warp has read tile
  // j's K, its V once every warp has read tile j's V, so the copies run while this tile's softmax
  // and P·V (resp. the next tile's S) compute. Every step commits one group, empty or not, so
  // "all but the newest group" is always the tile's K at the top and its V before P·V.
  const auto stage_k = [&](int64_t j, int* kpos) {
    if (tid < BN) kpos[tid] = p.causal && j + tid < p.n_kv ? __ldg(p.k_pos + j + tid) : 0;
    stage_rows_async<D, BN>(p.k, p, g, j, Ks);
  };
  // This block's keys: all of them, or its range of a split (whole tiles: no tile crosses k_end).
  const int64_t k_begin = kSplit ? int64_t(blockIdx.z) * p.split_keys : 0;
  const int64_t k_end = kSplit ? min(p.n_kv, k_begin + p.split_keys) : p.n_kv;
  int64_t j0 = mma_attention::next_visible_tile<BN>(p, k_begin, k_end, lane, qmin, qmax);
  int buf = 0;
  if (j0 < k_end) stage_k(j0, kpos_buf);
  cp_async_commit();
  if (j0 < k_end) stage_rows_async<D, BN>(p.v, p, g, j0, Vs);
  cp_async_commit();
  while (j0 < k_end) {
    const int* kpos_s = kpos_buf + buf * BN;
    cp_async_wait_all_but_newest();  // this thread's copies of tile j0's K
    __syncthreads();                 // everyone's, and the positions

    float s[NT][4];
    mma_attention::warp_scores<D, NT>(s, q_ld, k_ld);

    __syncthreads();  // every warp has read Ks: the next tile's K may land there
    {
      // (Found again after P·V rather than kept: a register less across the loop body.)
      const int64_t next = mma_attention::next_visible_tile<BN>(p, j0 + BN, k_end, lane, qmin, qmax);
      if (next < k_end) stage_k(next, kpos_buf + (buf ^ 1) * BN);
    }
    cp_async_commit();

    // Scale, softcap, mask; the tile's row maxima.
    float mx0 = -CUDART_INF_F, mx1 = -CUDART_INF_F;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * tig + (e & 1);
        bool vis = j0 + col < p.n_kv;
        if (p.causal) vis = vis && key_visible(p, e < 2 ? qp0 : qp1, kpos_s[col]);
        const float x = mma_attention::scaled_logit(p, s[nt][e]);  // as the mass passes recompute it
        s[nt][e] = vis ? x : -CUDART_INF_F;
      }
      mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    const float mn0 = fmaxf(m0, quad_max(mx0)), mn1 = fmaxf(m1, quad_max(mx1));
    // While a row has seen no key its max is −∞: subtract 0 instead (P = 0, α = 0), as attention.cu.
    const float ref0 = mn0 == -CUDART_INF_F ? 0.f : mn0, ref1 = mn1 == -CUDART_INF_F ? 0.f : mn1;
    const float alpha0 = expf(m0 - ref0), alpha1 = expf(m1 - ref1);
    m0 = mn0, m1 = mn1;
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      s[nt][0] = expf(s[nt][0] - ref0), s[nt][1] = expf(s[nt][1] - ref0);
      s[nt][2] = expf(s[nt][2] - ref1), s[nt][3] = expf(s[nt][3] - ref1);
      sum0 += s[nt][0] + s[nt][1];
      sum1 += s[nt][2] + s[nt][3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt) o[dt][0] *= alpha0, o[dt][1] *= alpha0, o[dt][2] *= alpha1, o[dt][3] *= alpha1;

    cp_async_wait_all_but_newest();  // tile j0's V (the next K may still be in flight)
    __syncthreads();

    // O += P·V, 16 keys per k-step: P's n-tiles 2kc and 2kc + 1 are the A fragment.
#pragma unroll
    for (int kc = 0; kc < BN / 16; ++kc) {
      const uint32_t a[4] = {pack_floats(s[2 * kc][0], s[2 * kc][1]), pack_floats(s[2 * kc][2], s[2 * kc][3]),
                             pack_floats(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                             pack_floats(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
      for (int dt = 0; dt < DT; dt += 2) {  // two n-tiles (16 head dims) per ldmatrix
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_ld + kc * 16 * RS + dt * 8);
        mma_16816(o[dt], a, b[0], b[1]);
        mma_16816(o[dt + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp has read Vs
    j0 = mma_attention::next_visible_tile<BN>(p, j0 + BN, k_end, lane, qmin, qmax);
    if (j0 < k_end) stage_rows_async<D, BN>(p.v, p, g, j0, Vs);
    cp_async_commit();
    buf ^= 1;
  }

  l0 = quad_sum(l0), l1 = quad_sum(l1);
  if constexpr (kSplit) {  // a range of a split: unnormalised O and (m, l) for combine_kernel
#pragma unroll
    for (int side = 0; side < 2; ++side) {
      const int vl = side == 0 ? r0 : r1;
      if (vl >= n_valid) continue;
      const int64_t at = split_index(int(blockIdx.z), g, int(gridDim.y), t0 + vl, p.n_vec);
      if (tig == 0) p.part_ml[at] = side == 0 ? make_float2(m0, l0) : make_float2(m1, l1);
      float* dst = p.part_o + at * D + 2 * tig;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt)
        *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[dt][2 * side], o[dt][2 * side + 1]);
    }
    return;
  }
  // O / l (0 for a row that saw no key).
  if (p.row_stats != nullptr && tig == 0) {  // for the key-total and segment-mass passes
    if (r0 < n_valid) p.row_stats[mma_attention::stats_index(t0 + r0, g, p.n_vec)] = make_float2(m0, l0);
    if (r1 < n_valid) p.row_stats[mma_attention::stats_index(t0 + r1, g, p.n_vec)] = make_float2(m1, l1);
  }
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
#pragma unroll
  for (int side = 0; side < 2; ++side) {
    const int vl = side == 0 ? r0 : r1;
    if (vl >= n_valid) continue;
    const float inv = side == 0 ? inv0 : inv1;
    float* dst = p.out + attention_tiles::vector_offset(t0 + vl, p.group, g, p.q_cols, D) + 2 * tig;
#pragma unroll
    for (int dt = 0; dt < DT; ++dt)
      *reinterpret_cast<float2*>(dst + dt * 8) = make_float2(o[dt][2 * side] * inv, o[dt][2 * side + 1] * inv);
  }
}

// The ranges of a split into one output (flash-decoding's combine), one block of D threads per
// (vector, KV head): M = max of the ranges' m, L = Σ l_z · exp(m_z − M), O = Σ O_z · exp(m_z − M),
// out = O / L (0 when no key is visible: L = 0); (M, L) to row_stats when wanted.
template <int D>
__global__ void __launch_bounds__(D) combine_kernel(const MmaParams p, int splits) {
  const int64_t t = blockIdx.x;
  const int g = blockIdx.y, n_kv_head = gridDim.y, d = threadIdx.x;
  float m = -CUDART_INF_F;
  for (int z = 0; z < splits; ++z) m = fmaxf(m, p.part_ml[split_index(z, g, n_kv_head, t, p.n_vec)].x);
  const float ref = m == -CUDART_INF_F ? 0.f : m;
  float l = 0.f, o = 0.f;
  for (int z = 0; z < splits; ++z) {
    const int64_t at = split_index(z, g, n_kv_head, t, p.n_vec);
    const float2 ml = p.part_ml[at];
    const float w = expf(ml.x - ref);
    l = fmaf(ml.y, w, l);
    o = fmaf(p.part_o[at * D + d], w, o);
  }
  p.out[attention_tiles::vector_offset(t, p.group, g, p.q_cols, D) + d] = l > 0.f ? o / l : 0.f;
  if (p.row_stats != nullptr && d == 0) p.row_stats[mma_attention::stats_index(t, g, p.n_vec)] = make_float2(m, l);
}

template <int D, int BN>
void launch(const MmaParams& p, int n_kv_head, int splits, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D, BN>();
  static_assert(smem <= 227 * 1024, "shared memory per block on sm_90");
  const int64_t blocks = (p.n_vec + kBlockVectors - 1) / kBlockVectors;
  constexpr const char* too_many = "attention_mma_cuda: too many query vectors for one grid";
  if (splits == 1) {
    mma_attention::launch_blocks(attention_mma_kernel<D, BN, false>, smem, blocks, n_kv_head, p, stream, too_many);
    return;
  }
  mma_attention::launch_blocks(attention_mma_kernel<D, BN, true>, smem, blocks, n_kv_head, p, stream, too_many, splits);
  combine_kernel<D><<<dim3(unsigned(p.n_vec), unsigned(n_kv_head)), D, 0, stream>>>(p, splits);
  CUDA_CHECK(cudaGetLastError());
}

// Keys per tile: 64, or 32 at head_dim 256 (to bound registers).
int tile_keys(int head_dim) { return head_dim == 256 ? 32 : 64; }

// The current device's SM count, asked of the driver once per device.
int sm_count() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  static std::array<std::atomic<int>, 64> known{};
  const bool cached = device >= 0 && device < int(known.size());
  int n = cached ? known[size_t(device)].load(std::memory_order_relaxed) : 0;
  if (n > 0) return n;
  CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  if (cached) known[size_t(device)].store(n, std::memory_order_relaxed);
  return n;
}

// How many key ranges a call is split into: 1 when its blocks fill the GPU, else enough ranges
// for about two blocks per SM, of at least 4 tiles each but the last (splitting short ranges costs
// more in the combine than it saves), at most kMaxKeySplits; a.key_splits when set (tests), at
// most one range per tile and kMaxKeySplits.
int key_splits(const AttentionArgs& a) {
  if (a.n_kv_head <= 0 || a.n_head < a.n_kv_head) return 1;  // (attention_cuda refuses the call)
  const int64_t tiles = (a.n_kv + tile_keys(a.head_dim) - 1) / tile_keys(a.head_dim);
  if (a.key_splits > 0)
    return int(std::max<int64_t>(1, std::min({int64_t(a.key_splits), tiles, int64_t(kMaxKeySplits)})));
  const int64_t blocks = (a.n_q * (a.n_head / a.n_kv_head) + kBlockVectors - 1) / kBlockVectors * a.n_kv_head;
  const int sms = sm_count();
  if (blocks >= sms) return 1;
  const int64_t want = (2 * int64_t(sms) + blocks - 1) / blocks;
  return int(std::max<int64_t>(1, std::min({want, tiles / 4, int64_t(kMaxKeySplits)})));
}

// The workspace of `splits` ranges' partial sums (0 for one).
size_t split_work_bytes(const AttentionArgs& a, int splits) {
  if (splits == 1) return 0;
  const size_t vectors = size_t(splits) * size_t(a.n_kv_head) * size_t(a.n_q) * size_t(a.n_head / a.n_kv_head);
  return vectors * (size_t(a.head_dim) * sizeof(float) + sizeof(float2));
}

// Keys per range for `splits` ranges: whole tiles.
int64_t split_keys(const AttentionArgs& a, int splits) {
  const int64_t bn = tile_keys(a.head_dim), tiles = (a.n_kv + bn - 1) / bn;
  return (tiles + splits - 1) / splits * bn;
}

}  // namespace

bool attention_mma_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("RAGKV_CUDA_ATTENTION");
    return !(v && std::strcmp(v, "f32") == 0);
  }();
  return on;
}

bool attention_mma_applies(const AttentionArgs& a, bool with_mass) {
  return a.tensor_cores && attention_mma_enabled() && a.kv_f16 && !with_mass && a.n_kv > 0;
}

size_t attention_mma_work_bytes(const AttentionArgs& a) { return split_work_bytes(a, key_splits(a)); }

void attention_mma_cuda(const AttentionArgs& a, cudaStream_t stream, float2* row_stats) {
  if (a.causal && !a.k_tile_bounds) cuda_internal_fail("attention_mma_cuda: causal attention without k_tile_bounds");
  if (a.n_q == 0) return;  // no block to launch
  if (a.n_kv < 1) cuda_internal_fail("attention_mma_cuda: no keys (attention_cuda gives such queries 0)");
  MmaParams p{};
  static_cast<mma_attention::QueryKeyParams&>(p) = mma_attention::query_key_params(a);
  p.v = static_cast<const __half*>(a.v);
  p.out = a.out;
  p.row_stats = row_stats;
  const int splits = key_splits(a);
  p.split_keys = splits == 1 ? a.n_kv : split_keys(a, splits);
  const int ranges = int((a.n_kv + p.split_keys - 1) / p.split_keys);  // ≤ splits (whole tiles per range)
  if (ranges > 1 && p.n_vec > INT_MAX) cuda_internal_fail("attention_mma_cuda: too many query vectors for one grid");
  const mma_attention::StreamWorkspace work(a.mma_work, a.mma_work_bytes, split_work_bytes(a, splits), stream);
  if (ranges > 1) {
    const size_t vectors = size_t(ranges) * size_t(a.n_kv_head) * size_t(p.n_vec);
    p.part_o = reinterpret_cast<float*>(work.bytes());
    p.part_ml = reinterpret_cast<float2*>(p.part_o + vectors * size_t(a.head_dim));
  }
  switch (a.head_dim) {
    case 32: launch<32, 64>(p, a.n_kv_head, ranges, stream); break;
    case 64: launch<64, 64>(p, a.n_kv_head, ranges, stream); break;
    case 128: launch<128, 64>(p, a.n_kv_head, ranges, stream); break;
    default: launch<256, 32>(p, a.n_kv_head, ranges, stream); break;
  }
}

}  // namespace ragkv
