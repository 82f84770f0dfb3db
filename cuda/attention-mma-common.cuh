// What the tensor-core attention kernels share (attention-mma.cu, attention-key-mass.cu,
// attention-segment-mass.cu): the block shape (4 warps, 16 query vectors each: one mma M per
// warp), the padded f16 row stride of their shared-memory tiles, the arguments they read, the
// staging of query vectors and key rows, tile skipping, S = Q·Kᵀ on mma.sync, where a vector's
// softmax statistics go, and the launchers' workspace and grid.
// Included from .cu files only (device code, and host code that launches it).
#pragma once
#include <cuda_fp16.h>

#include <climits>
#include <cstddef>
#include <cstdint>

#include "cuda/attention-tiles.cuh"
#include "cuda/attention.cuh"
#include "cuda/cuda-check.h"
#include "cuda/key-tile-bounds.h"
#include "cuda/mma-ops.cuh"

namespace ragkv::mma_attention {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockVectors = 16 * kWarps;  // query vectors per block (16 per warp: one mma M)

// f16 rows padded by 8 halves: a row stride of D/2 + 4 words puts the 8 rows × 4 columns of a
// fragment load on 32 distinct banks.
template <int D>
constexpr int row_halves() { return D + 8; }

// The arguments the kernels read, from a checked call (attention.cuh).
struct QueryKeyParams {
  const float* q;        // f32 [n_q][q_cols]
  const int32_t* q_pos;  // [n_q] (causal)
  const __half* k;       // f16 [>= n_kv][kv_cols]
  const int32_t* k_pos;  // [n_kv] (causal)
  const int32_t* k_tile_bounds;  // [⌈n_kv / 32⌉][2]: min, max of k_pos per 32 keys (causal)
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
  p.k_tile_bounds = a.k_tile_bounds;
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

// Vectors [t0, t0 + n_valid) of KV head g as f16 rows of Qs ([kBlockVectors][row_halves<D>]),
// zeros past n_valid, and their positions in qpos_s ([kBlockVectors], 0 past n_valid or when not
// causal); every thread of the block takes part.
template <int D>
__device__ __forceinline__ void stage_query_vectors(const QueryKeyParams& p, int64_t t0, int n_valid, int g, __half* Qs,
                                                    int* qpos_s) {
  for (int idx = threadIdx.x; idx < kBlockVectors * (D / 4); idx += kThreads) {
    const int vl = idx / (D / 4), c = (idx % (D / 4)) * 4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (vl < n_valid)
      val = *reinterpret_cast<const float4*>(p.q + attention_tiles::vector_offset(t0 + vl, p.group, g, p.q_cols, D) + c);
    __half2* dst = reinterpret_cast<__half2*>(Qs + vl * row_halves<D>() + c);
    dst[0] = __floats2half2_rn(val.x, val.y);
    dst[1] = __floats2half2_rn(val.z, val.w);
  }
  const int tid = threadIdx.x;
  if (tid < kBlockVectors) qpos_s[tid] = tid < n_valid && p.causal ? p.q_pos[(t0 + tid) / p.group] : 0;
}

// Rows [j0, j0 + BN) of KV head g's keys as they are (f16) in Ks ([BN][row_halves<D>]), zeros past
// n_kv, and their positions in kpos_s ([BN]); every thread of the block takes part (plain loads:
// the mass passes stage one tile at a time).
template <int D, int BN>
__device__ __forceinline__ void stage_key_rows(const QueryKeyParams& p, int g, int64_t j0, __half* Ks, int* kpos_s) {
  constexpr int kPerRow = D / 8;
  for (int idx = threadIdx.x; idx < BN * kPerRow; idx += kThreads) {
    const int r = idx / kPerRow, c = (idx % kPerRow) * 8;
    const int64_t j = j0 + r;
    uint4 val = make_uint4(0u, 0u, 0u, 0u);
    if (j < p.n_kv) val = *reinterpret_cast<const uint4*>(p.k + j * p.kv_cols + int64_t(g) * D + c);
    *reinterpret_cast<uint4*>(Ks + r * row_halves<D>() + c) = val;
  }
  const int tid = threadIdx.x;
  if (tid < BN) kpos_s[tid] = p.causal && j0 + tid < p.n_kv ? __ldg(p.k_pos + j0 + tid) : 0;
}

// Whether no query of the block (positions in [qmin, qmax]) sees any key of the tile at j0 < n_kv,
// from the tile's position bounds (key-tile-bounds.h: one pair per 32 keys, BN / 32 pairs per
// tile): the same decision in every lane.
template <int BN>
__device__ __forceinline__ bool tile_hidden(const QueryKeyParams& p, int64_t j0, int qmin, int qmax) {
  if (!p.causal) return false;
  static_assert(BN % kKeyTileKeys == 0, "key tiles of whole bound tiles");
  int kmin = INT_MAX, kmax = INT_MIN;
#pragma unroll
  for (int s = 0; s < BN / kKeyTileKeys; ++s) {
    const int64_t j = j0 + int64_t(s) * kKeyTileKeys;
    if (j < p.n_kv) {
      const int64_t t = j / kKeyTileKeys;
      kmin = min(kmin, __ldg(p.k_tile_bounds + 2 * t));
      kmax = max(kmax, __ldg(p.k_tile_bounds + 2 * t + 1));
    }
  }
  return kmin > qmax || (p.window > 0 && int64_t(kmax) <= int64_t(qmin) - p.window);
}

// The first tile in [j0, end) that some query of the block sees (end when none; end ≤ n_kv, a
// tile boundary or n_kv): block-uniform. The next tile is tested alone (the usual answer); past a
// hidden one, the warp's lanes test 32 tiles at once (a causal block near the start of a long
// prompt skips every tile after its own).
template <int BN>
__device__ __forceinline__ int64_t next_visible_tile(const QueryKeyParams& p, int64_t j0, int64_t end, int lane, int qmin,
                                                     int qmax) {
  if (j0 >= end || !tile_hidden<BN>(p, j0, qmin, qmax)) return min(j0, end);
  for (j0 += BN; j0 < end; j0 += 32 * BN) {
    const int64_t j = j0 + int64_t(lane) * BN;
    const unsigned visible = __ballot_sync(0xffffffffu, j < end && !tile_hidden<BN>(p, j, qmin, qmax));
    if (visible) return j0 + int64_t(__ffs(visible) - 1) * BN;
  }
  return end;
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

// scale · S, softcapped: the logit, rounded alike in every tensor-core kernel (__fmul_rn: never
// contracted into a neighbouring operation), so that the mass passes recompute the attention's.
__device__ __forceinline__ float scaled_logit(const QueryKeyParams& p, float s) {
  float x = __fmul_rn(p.scale, s);
  if (p.softcap > 0.f) x = __fmul_rn(p.softcap, tanhf(x / p.softcap));
  return x;
}

// The tensor-core attention's probability of key row j (position kp, S value s) for a query at qp
// whose row ended with (m, l): 0 past n_kv, when masked, or when the row saw no key (l = 0).
__device__ __forceinline__ float final_probability(const QueryKeyParams& p, float s, int64_t j, int qp, int kp,
                                                   float m, float l) {
  bool vis = j < p.n_kv && l > 0.f;
  if (p.causal) vis = vis && attention_tiles::key_visible(qp, kp, p.window);
  return vis ? expf(scaled_logit(p, s) - m) / l : 0.f;
}

// Vector t of KV head g's final softmax statistics (m: the largest logit it sees, −∞ when none;
// l: Σ exp(logit − m)) in a [n_kv_head][n_vec] array of float2.
__device__ __forceinline__ int64_t stats_index(int64_t t, int g, int64_t n_vec) { return int64_t(g) * n_vec + t; }

// Bytes of the [n_kv_head][n_vec] float2 statistics of a call, rounded up to 256 (a workspace
// part that follows them stays aligned).
// This lane's two rows' statistics (vectors t0 + r0 and t0 + r1 of KV head g; (0, 0) past n_valid).
__device__ __forceinline__ void load_row_stats(const float2* stats, int64_t t0, int r0, int r1, int n_valid, int g,
                                               int64_t n_vec, float (&m)[2], float (&l)[2]) {
#pragma unroll
  for (int side = 0; side < 2; ++side) {
    const int vl = side == 0 ? r0 : r1;
    const float2 st = vl < n_valid ? stats[stats_index(t0 + vl, g, n_vec)] : make_float2(0.f, 0.f);
    m[side] = st.x, l[side] = st.y;
  }
}

inline size_t stats_bytes(const AttentionArgs& a) {
  if (a.n_kv_head <= 0) return 0;  // (attention_cuda refuses the call)
  const size_t bytes = size_t(a.n_kv_head) * size_t(a.n_q) * size_t(a.n_head / a.n_kv_head) * sizeof(float2);
  return (bytes + 255) / 256 * 256;
}

// A kernel's device workspace of `bytes`: the caller's (given, given_bytes) when it is large
// enough, else memory of its own allocated on the stream and freed there (stream-ordered) when
// this goes, also when a launch throws. No memory at all when bytes is 0.
class StreamWorkspace {
 public:
  StreamWorkspace(void* given, size_t given_bytes, size_t bytes, cudaStream_t stream) : stream_(stream) {
    if (bytes == 0) return;
    if (given != nullptr && given_bytes >= bytes) {
      ptr_ = given;
      return;
    }
    CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream));
    own_ = true;
  }
  ~StreamWorkspace() {
    // (Not thrown from a destructor; cleared, so that no later check reports it as its own.)
    if (own_ && cudaFreeAsync(ptr_, stream_) != cudaSuccess) (void)cudaGetLastError();
  }
  StreamWorkspace(const StreamWorkspace&) = delete;
  StreamWorkspace& operator=(const StreamWorkspace&) = delete;
  char* bytes() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  bool own_ = false;
};

// Launches kernel(p) on a grid of blocks × n_kv_head × splits blocks of kThreads threads with smem
// bytes of dynamic shared memory (the kernel's limit set to it at every launch); `too_many` names
// the failure when blocks exceeds the grid.
template <typename Params>
void launch_blocks(void (*kernel)(Params), size_t smem, int64_t blocks, int n_kv_head, const Params& p,
                   cudaStream_t stream, const char* too_many, int splits = 1) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  if (blocks > INT_MAX) cuda_internal_fail(too_many);
  kernel<<<dim3(unsigned(blocks), unsigned(n_kv_head), unsigned(splits)), kThreads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv::mma_attention
