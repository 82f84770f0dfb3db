// Fused attention for the selective-recompute fusor (DESIGN.md §4): queries at arbitrary
// absolute positions against key rows in any position order, FlashAttention-style (Dao et al.
// 2022, Alg. 1: one pass over K/V tiles with an online softmax), f32 arithmetic throughout.
// Calls with f16 K/V and no segment mass or key totals go to the tensor-core kernel of
// attention-mma.cu instead, and so do key totals and segment mass on f16 K/V (followed by
// attention-key-mass.cu or attention-segment-mass.cu); RAGKV_CUDA_ATTENTION=f32 keeps them here.
// This kernel serves f32 K/V.
//
// Work split. A query *vector* is one (query row, query head) pair; the GQA heads of a KV head g
// are heads g·group … g·group + group − 1, so vector t = row · group + hg of KV head g reads the
// same K/V as its neighbours. A block (256 threads) owns M consecutive vectors of one KV head
// (grid: ⌈n_q·group / M⌉ × n_kv_head): the K/V tiles it stages in shared memory serve every
// query row and every query head of the group in the block. M = 64, or 16 when the grid would
// not fill the GPU with M = 64 (few query rows, e.g. a short question). Keys are not split
// across blocks here: a call with at most kDecodeMaxVectors vectors per KV head over more than
// one range of keys, without segment mass or key totals, goes to the split-K kernels of
// attention-decode.cu instead (one query row would otherwise get only n_kv_head blocks).
//
// Per key tile of 32 rows (kTileK), threads laid out 16 (tq) × 16 (tk):
//   1. S = scale · Q·Kᵀ: thread (tq, tk) computes the 2 keys tk, tk + 16 for its M/16 vectors
//      tq, tq + 16, … as float4 dot products from shared memory (plain FMA, no tensor cores:
//      the CPU reference is f32 and TF32/f16 inputs would break its tolerance); then softcap,
//      then the mask: −∞ unless the key row is < n_kv and, when causal, its position kp
//      satisfies kp ≤ qp and (window == 0 or kp > qp − window).
//   2. Online softmax per vector: the tile max and sum are reduced over the 16 tk lanes of the
//      vector with xor shuffles (every lane ends with bit-identical values); running max m, sum
//      l, accumulator rescaled by α = exp(m_old − m_new); P = exp(S − m_new) goes to shared memory.
//   3. O += P·V: thread (tq, tk) owns head_dim/16 output dimensions (float4 or float2 groups
//      strided by 16 lanes) of the same vectors, so α is applied in registers.
//   Then O / l is written (0 when l == 0: a query that sees no key gets 0, as on the CPU).
//
// Tile skipping. Each warp loads the tile's 32 key positions (one per lane) and reduces their
// min and max with __reduce_{min,max}_sync; the block's query position range was reduced once
// at the start. A tile whose keys all lie after the block's last query, or (sliding window)
// all at or before the block's first query minus the window, is skipped without loading K/V:
// every warp computes the same decision from the same data, so the branch is block-uniform and
// may contain __syncthreads. With ascending key positions causal prefill skips about half the
// tiles and a sliding-window layer all but its window. Keys are never assumed to be sorted: the
// per-pair mask in step 1 is what decides visibility.
//
// Shared memory per block (f32, K/V widened from f16 once when staged):
//   Q [M][D + 4], K [32][D + 4], V [32][D], P [M][48], key and query positions.
// Padding: float4 reads of rows tk … tk + 7 of K hit distinct banks with a row stride of D + 4;
// the two query rows a warp writes to P sit 16 banks apart with a stride of 48.
// Sizes: M = 64: 30 KiB (D 32), 46 KiB (64), 78 KiB (128), 142 KiB (256); M = 16: 14 to 84 KiB
// (above 48 KiB the launcher opts in with cudaFuncAttributeMaxDynamicSharedMemorySize).
// Registers (ptxas, sm_90): 48 to 183 per thread; M = 64 with D = 128 fits 2 blocks per SM.
// Synchronisation per tile: barrier (the previous tile's readers of K and V are done) → stage K,
// V and key positions → barrier → S, softmax, write P → __syncwarp → P·V. A row of P is written
// and read only by the warp that holds its vector (tq = 2w, 2w + 1), so P needs no block barrier.
//
// Segment mass (Cache-Craft inter/intra attention) needs normalised probabilities, so it is a
// second pass in the same kernel after m and l are final: the visible tiles are visited again
// (K only), P = exp(S − m) / l is recomputed with the same code, and for every segment that
// meets the tile each vector's sum over its keys is reduced over the 16 lanes and added to
// global memory with one atomicAdd (the launcher zeroes seg_mass first). Segment ids come from a
// binary search of seg_begin per tile. Costs about one more Q·Kᵀ. Key totals (SegmentMass::
// key_totals, the question's attention per key) use the same second pass but sum each key's
// probabilities over the block's vectors in shared memory, one global atomicAdd per key and block:
// a per-key SegmentMass looped over 32 segments per tile and sent [n_q][n_head][n_kv] to the host,
// which made prophet selection 4.9x slower than full prefill on an H100 (bench/results). Only
// vectors of rows from key_mass_first_row on count. With f16 K/V both go to the tensor-core kernel
// and its key-total or segment-mass pass instead (attention-key-mass.cu, attention-segment-mass.cu);
// these passes serve f32 K/V and RAGKV_CUDA_ATTENTION=f32.
//
// Numerics against the CPU reference (core/backend/cpu-backend.cpp: SGEMM scores, a two-pass softmax in
// f32, SGEMM P·V): the same f32 operations in another order — dot products summed sequentially
// over head_dim here, the running max rescaling O and l (each rescale one more rounding), and O
// divided by l at the end instead of P normalised first. expf and tanhf are the accurate
// versions (no --use_fast_math). The differences are a few ulp of the logits and a few ulp per
// accumulated term; tests/test-cuda-attention.cpp states the tolerance.
#include "cuda/attention.cuh"
#include "cuda/attention-decode.cuh"
#include "cuda/attention-key-mass.cuh"
#include "cuda/attention-mma.cuh"
#include "cuda/attention-segment-mass.cuh"
#include "cuda/attention-tiles.cuh"

#include <cuda_fp16.h>
#include <math_constants.h>

#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>

#include "cuda/cuda-check.h"

namespace ragkv {

namespace {

constexpr int kThreads = 256;          // 16 vector groups (tq) × 16 lanes (tk)
constexpr int kTileK = 32;             // keys per tile: one key position per lane of a warp
constexpr int kPStride = kTileK + 16;  // P tile row stride in floats (≡ 16 mod 32 banks)

// Floats (and ints) of dynamic shared memory for head_dim D and M vectors per block.
template <int D, int M>
constexpr size_t smem_floats() {
  return size_t(M) * (D + 4) + size_t(kTileK) * (D + 4) + size_t(kTileK) * D + size_t(M) * kPStride +
         kTileK + M;
}

struct Params {
  const float* q;         // f32 [n_q][q_cols]
  const int32_t* q_pos;   // [n_q]
  const void* k;          // f16/f32 [>= n_kv][kv_cols]
  const void* v;
  const int32_t* k_pos;   // [n_kv]
  float* out;             // f32 [n_q][q_cols]
  const int64_t* seg_begin;  // [n_seg + 1]
  float* seg_mass;        // f32 [n_q][n_head][n_seg], or null
  float* key_mass;        // f32 [n_kv], or null (then seg_mass is null)
  int64_t mass_vec_begin;  // key totals from vectors [mass_vec_begin, n_vec) only
  int64_t n_kv, n_vec;    // n_vec = n_q · group query vectors per KV head
  int64_t q_cols, kv_cols;
  int n_head, group, n_seg, window;
  float scale, softcap;
  bool causal;
};

__device__ __forceinline__ float group16_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Butterfly sum over the 16 lanes of a half warp; a + b == b + a, so every lane gets the same bits.
__device__ __forceinline__ float group16_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// VW consecutive floats (VW = 4 or 2, aligned to VW floats) to and from registers.
template <int VW>
__device__ __forceinline__ void load_vec(const float* src, float* dst) {
  if constexpr (VW == 4) {
    const float4 t = *reinterpret_cast<const float4*>(src);
    dst[0] = t.x, dst[1] = t.y, dst[2] = t.z, dst[3] = t.w;
  } else {
    static_assert(VW == 2, "vector width 2 or 4");
    const float2 t = *reinterpret_cast<const float2*>(src);
    dst[0] = t.x, dst[1] = t.y;
  }
}

template <int VW>
__device__ __forceinline__ void store_vec(float* dst, const float* src) {
  if constexpr (VW == 4) {
    *reinterpret_cast<float4*>(dst) = make_float4(src[0], src[1], src[2], src[3]);
  } else {
    static_assert(VW == 2, "vector width 2 or 4");
    *reinterpret_cast<float2*>(dst) = make_float2(src[0], src[1]);
  }
}

// 16 bytes of a K or V row (8 halves or 4 floats), widened to f32 in shared memory.
__device__ __forceinline__ void load_chunk(const __half* src, float* dst) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src));
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
  const float2 a = __half22float2(h[0]), b = __half22float2(h[1]);
  const float2 c = __half22float2(h[2]), d = __half22float2(h[3]);
  reinterpret_cast<float4*>(dst)[0] = make_float4(a.x, a.y, b.x, b.y);
  reinterpret_cast<float4*>(dst)[1] = make_float4(c.x, c.y, d.x, d.y);
}

__device__ __forceinline__ void load_chunk(const float* src, float* dst) {
  *reinterpret_cast<float4*>(dst) = __ldg(reinterpret_cast<const float4*>(src));
}

// Stages rows [j0, j0 + kTileK) of KV head g (columns g·D … g·D + D − 1) as f32 rows of
// `stride` floats; rows ≥ n_kv become zeros (never read from global memory).
template <int D, typename T>
__device__ __forceinline__ void load_kv_tile(const T* __restrict__ src, int64_t kv_cols, int g, int64_t j0,
                                             int64_t n_kv, float* dst, int stride) {
  constexpr int kChunk = 16 / int(sizeof(T));  // elements per 16-byte load
  constexpr int kPerRow = D / kChunk;
  for (int idx = threadIdx.x; idx < kTileK * kPerRow; idx += kThreads) {
    const int r = idx / kPerRow, c = (idx % kPerRow) * kChunk;
    float* d = dst + r * stride + c;
    const int64_t j = j0 + r;
    if (j < n_kv) {
      load_chunk(src + j * kv_cols + int64_t(g) * D + c, d);
    } else {
#pragma unroll
      for (int e = 0; e < kChunk; e += 4) *reinterpret_cast<float4*>(d + e) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
}

// Whether a query at qp sees a key at kp (causal by position, optional sliding window).
__device__ __forceinline__ bool key_visible(const Params& p, int qp, int kp) {
  return attention_tiles::key_visible(qp, kp, p.window);
}

// Loads this lane's key position of the tile at j0 into kp (0 past n_kv or when not causal) and
// decides whether no query of the block, whose positions lie in [qmin, qmax], sees any key of
// the tile. Every warp reads the same positions, so every thread of the block gets the same
// answer without a barrier. Called with j0 < n_kv: lane 0's key exists.
__device__ __forceinline__ bool tile_hidden(const Params& p, int64_t j0, int lane, int qmin, int qmax, int& kp) {
  kp = 0;
  if (!p.causal) return false;
  const bool valid = j0 + lane < p.n_kv;
  if (valid) kp = __ldg(p.k_pos + j0 + lane);
  const int kmin = __reduce_min_sync(0xffffffffu, valid ? kp : INT_MAX);
  const int kmax = __reduce_max_sync(0xffffffffu, valid ? kp : INT_MIN);
  return kmin > qmax || (p.window > 0 && int64_t(kmax) <= int64_t(qmin) - p.window);
}

// Masked logits of this thread's RQ vectors (tq + 16a) × 2 keys (tk, tk + 16) of the tile at j0:
// scale · q·k, softcapped, −∞ where the key is past n_kv or invisible.
template <int D, int RQ>
__device__ __forceinline__ void tile_scores(const Params& p, const float* Qs, const float* Ks, const int* qpos_s,
                                            const int* kpos_s, int64_t j0, int tq, int tk, float (&s)[RQ][2]) {
  constexpr int kStride = D + 4;
  float dot[RQ][2];
#pragma unroll
  for (int a = 0; a < RQ; ++a) dot[a][0] = dot[a][1] = 0.f;
#pragma unroll 8
  for (int d = 0; d < D; d += 4) {
    float4 kv[2];
#pragma unroll
    for (int b = 0; b < 2; ++b) kv[b] = *reinterpret_cast<const float4*>(Ks + (tk + 16 * b) * kStride + d);
#pragma unroll
    for (int a = 0; a < RQ; ++a) {
      const float4 qv = *reinterpret_cast<const float4*>(Qs + (tq + 16 * a) * kStride + d);
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        float acc = dot[a][b];
        acc = fmaf(qv.x, kv[b].x, acc);
        acc = fmaf(qv.y, kv[b].y, acc);
        acc = fmaf(qv.z, kv[b].z, acc);
        acc = fmaf(qv.w, kv[b].w, acc);
        dot[a][b] = acc;
      }
    }
  }
#pragma unroll
  for (int a = 0; a < RQ; ++a) {
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      const int kl = tk + 16 * b;
      bool vis = j0 + kl < p.n_kv;
      if (p.causal) vis = vis && key_visible(p, qpos_s[tq + 16 * a], kpos_s[kl]);
      float x = p.scale * dot[a][b];
      if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
      s[a][b] = vis ? x : -CUDART_INF_F;
    }
  }
}

template <int D, int M, typename T>
__global__ void __launch_bounds__(kThreads) attention_kernel(const Params p) {
  static_assert(D % 32 == 0 && M % 16 == 0, "head_dim a multiple of 32, M of 16");
  constexpr int RQ = M / 16;                  // vectors per thread
  constexpr int VW = D / 16 >= 4 ? 4 : D / 16;  // output floats per vector access
  constexpr int NC = D / (16 * VW);           // output vector groups per thread
  constexpr int kQKStride = D + 4;

  extern __shared__ float4 smem_f4[];
  float* Qs = reinterpret_cast<float*>(smem_f4);  // [M][D + 4]
  float* Ks = Qs + M * kQKStride;                 // [kTileK][D + 4]
  float* Vs = Ks + kTileK * kQKStride;            // [kTileK][D]
  float* Ps = Vs + kTileK * D;                    // [M][kPStride]
  int* kpos_s = reinterpret_cast<int*>(Ps + M * kPStride);  // [kTileK]
  int* qpos_s = kpos_s + kTileK;                             // [M]

  const int tid = threadIdx.x, lane = tid % 32, tq = tid / 16, tk = tid % 16;
  const int g = blockIdx.y;
  const int64_t t0 = int64_t(blockIdx.x) * M;  // first vector of the block
  const int n_valid = int(min(int64_t(M), p.n_vec - t0));
  const T* kg = static_cast<const T*>(p.k);
  const T* vg = static_cast<const T*>(p.v);

  // Stage the block's query vectors (zeros past n_vec) and their positions.
  for (int idx = tid; idx < M * (D / 4); idx += kThreads) {
    const int vl = idx / (D / 4), c = (idx % (D / 4)) * 4;
    float4 val = make_float4(0.f, 0.f, 0.f, 0.f);
    if (vl < n_valid)
      val = *reinterpret_cast<const float4*>(p.q + attention_tiles::vector_offset(t0 + vl, p.group, g, p.q_cols, D) + c);
    *reinterpret_cast<float4*>(Qs + vl * kQKStride + c) = val;
  }
  if (tid < M) qpos_s[tid] = tid < n_valid && p.causal ? p.q_pos[(t0 + tid) / p.group] : 0;
  __syncthreads();

  // The block's query position range, in every warp.
  int qmin, qmax;
  attention_tiles::query_position_range(qpos_s, n_valid, p.causal, lane, qmin, qmax);

  float m[RQ], l[RQ], o[RQ][NC * VW];
#pragma unroll
  for (int a = 0; a < RQ; ++a) {
    m[a] = -CUDART_INF_F;
    l[a] = 0.f;
#pragma unroll
    for (int e = 0; e < NC * VW; ++e) o[a][e] = 0.f;
  }

  for (int64_t j0 = 0; j0 < p.n_kv; j0 += kTileK) {
    int kp;
    if (tile_hidden(p, j0, lane, qmin, qmax, kp)) continue;  // block-uniform
    __syncthreads();  // the previous tile's readers of Ks, Vs and kpos_s are done
    if (tid < 32) kpos_s[tid] = kp;
    load_kv_tile<D>(kg, p.kv_cols, g, j0, p.n_kv, Ks, kQKStride);
    load_kv_tile<D>(vg, p.kv_cols, g, j0, p.n_kv, Vs, D);
    __syncthreads();

    float s[RQ][2];
    tile_scores<D, RQ>(p, Qs, Ks, qpos_s, kpos_s, j0, tq, tk, s);
#pragma unroll
    for (int a = 0; a < RQ; ++a) {
      const float m_new = fmaxf(m[a], group16_max(fmaxf(s[a][0], s[a][1])));
      // While the vector has seen no key m_new is −∞: subtract 0 instead, so exp(−∞ − 0) = 0
      // gives P = 0 and α = 0 (O and l are still 0) rather than exp(−∞ + ∞) = NaN.
      const float m_ref = m_new == -CUDART_INF_F ? 0.f : m_new;
      const float alpha = expf(m[a] - m_ref);
      const float p0 = expf(s[a][0] - m_ref), p1 = expf(s[a][1] - m_ref);
      Ps[(tq + 16 * a) * kPStride + tk] = p0;
      Ps[(tq + 16 * a) * kPStride + tk + 16] = p1;
      l[a] = l[a] * alpha + group16_sum(p0 + p1);
      m[a] = m_new;
#pragma unroll
      for (int e = 0; e < NC * VW; ++e) o[a][e] *= alpha;
    }
    __syncwarp();  // P rows tq + 16a are written and read by the warp holding tq only

#pragma unroll 2
    for (int jj = 0; jj < kTileK; jj += 4) {
      float pr[RQ][4];
#pragma unroll
      for (int a = 0; a < RQ; ++a) load_vec<4>(Ps + (tq + 16 * a) * kPStride + jj, pr[a]);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float* vrow = Vs + (jj + e) * D + tk * VW;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          float vv[VW];
          load_vec<VW>(vrow + c * 16 * VW, vv);
#pragma unroll
          for (int a = 0; a < RQ; ++a)
#pragma unroll
            for (int w = 0; w < VW; ++w) o[a][c * VW + w] = fmaf(pr[a][e], vv[w], o[a][c * VW + w]);
        }
      }
    }
  }

  // O / l; 0 for a vector that saw no key (l == 0).
#pragma unroll
  for (int a = 0; a < RQ; ++a) {
    const int vl = tq + 16 * a;
    if (vl >= n_valid) continue;
    const float inv = l[a] > 0.f ? 1.f / l[a] : 0.f;
    float* dst = p.out + attention_tiles::vector_offset(t0 + vl, p.group, g, p.q_cols, D) + tk * VW;
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      float r[VW];
#pragma unroll
      for (int w = 0; w < VW; ++w) r[w] = o[a][c * VW + w] * inv;
      store_vec<VW>(dst + c * 16 * VW, r);
    }
  }

  if (p.seg_mass == nullptr && p.key_mass == nullptr) return;  // block-uniform
  if (p.key_mass != nullptr && t0 + n_valid <= p.mass_vec_begin) return;  // no vector of the block counts

  // Second pass: normalised probabilities summed per key segment.
  float m_ref[RQ], inv_l[RQ];
#pragma unroll
  for (int a = 0; a < RQ; ++a) {
    m_ref[a] = m[a] == -CUDART_INF_F ? 0.f : m[a];
    inv_l[a] = l[a] > 0.f ? 1.f / l[a] : 0.f;
  }
  for (int64_t j0 = 0; j0 < p.n_kv; j0 += kTileK) {
    int kp;
    if (tile_hidden(p, j0, lane, qmin, qmax, kp)) continue;  // block-uniform
    __syncthreads();  // the previous tile's (or the first pass's) readers of Ks and kpos_s are done
    if (tid < 32) kpos_s[tid] = kp;
    if (p.key_mass != nullptr && tid < kTileK) Ps[tid] = 0.f;  // the tile's key totals (P is unused here)
    load_kv_tile<D>(kg, p.kv_cols, g, j0, p.n_kv, Ks, kQKStride);
    __syncthreads();

    float s[RQ][2];
    tile_scores<D, RQ>(p, Qs, Ks, qpos_s, kpos_s, j0, tq, tk, s);
    float pr[RQ][2];
#pragma unroll
    for (int a = 0; a < RQ; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) pr[a][b] = expf(s[a][b] - m_ref[a]) * inv_l[a];

    if (p.key_mass != nullptr) {  // block-uniform
      // Key totals: each key's probabilities summed over the thread's vectors, the warp's two
      // vector groups (lanes l and l + 16 hold the same key), the block's warps in shared memory,
      // then one global atomicAdd per key and block.
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        float v = 0.f;
#pragma unroll
        for (int a = 0; a < RQ; ++a)
          if (tq + 16 * a < n_valid && t0 + tq + 16 * a >= p.mass_vec_begin) v += pr[a][b];
        v += __shfl_xor_sync(0xffffffffu, v, 16);
        if (lane < 16 && v != 0.f) atomicAdd(Ps + tk + 16 * b, v);
      }
      __syncthreads();
      if (tid < kTileK && j0 + tid < p.n_kv && Ps[tid] != 0.f) atomicAdd(p.key_mass + j0 + tid, Ps[tid]);
      continue;
    }

    const int64_t j_last = min(j0 + kTileK, p.n_kv) - 1;
    const int sg_lo = max(0, attention_tiles::segment_of(p.seg_begin, p.n_seg, j0));
    const int sg_hi = min(p.n_seg - 1, attention_tiles::segment_of(p.seg_begin, p.n_seg, j_last));
    for (int sg = sg_lo; sg <= sg_hi; ++sg) {  // block-uniform bounds: the shuffles see full warps
      const int64_t b0 = __ldg(p.seg_begin + sg), b1 = __ldg(p.seg_begin + sg + 1);
#pragma unroll
      for (int a = 0; a < RQ; ++a) {
        float part = 0.f;
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int64_t j = j0 + tk + 16 * b;
          if (j >= b0 && j < b1) part += pr[a][b];
        }
        part = group16_sum(part);
        const int vl = tq + 16 * a;
        if (tk == 0 && vl < n_valid && part != 0.f) {
          const int64_t t = t0 + vl, row = attention_tiles::vector_row(t, p.group);
          const int h = attention_tiles::vector_head(t, p.group, g);
          atomicAdd(p.seg_mass + (row * p.n_head + h) * p.n_seg + sg, part);
        }
      }
    }
  }
}

// Throws ragkv::Error with a printf-style message. core/util/error.h (fmt) does not compile under
// nvcc, so the error goes through the out-of-line CUDA failure path of cuda-check.cpp.
[[noreturn]] __attribute__((format(printf, 1, 2))) void attention_fail(const char* fmt, ...) {
  char msg[384];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  cuda_check_fail(cudaErrorInvalidValue, msg, __FILE__, __LINE__);
}

template <int D, int M, typename T>
void launch(const Params& p, int n_kv_head, cudaStream_t stream) {
  constexpr size_t smem = smem_floats<D, M>() * sizeof(float);
  static_assert(smem <= 227 * 1024, "shared memory per block on sm_90");
  const auto kernel = attention_kernel<D, M, T>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t blocks = (p.n_vec + M - 1) / M;
  if (blocks > INT_MAX) attention_fail("attention_cuda: %lld query vectors are too many for one grid", (long long)p.n_vec);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(n_kv_head));
  kernel<<<grid, kThreads, smem, stream>>>(p);
  CUDA_CHECK(cudaGetLastError());
}

template <int D>
void launch_head_dim(const Params& p, int n_kv_head, bool kv_f16, bool small_m, cudaStream_t stream) {
  if (kv_f16) {
    if (small_m) launch<D, 16, __half>(p, n_kv_head, stream);
    else launch<D, 64, __half>(p, n_kv_head, stream);
  } else {
    if (small_m) launch<D, 16, float>(p, n_kv_head, stream);
    else launch<D, 64, float>(p, n_kv_head, stream);
  }
}

bool misaligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; }

}  // namespace

AttentionRoute attention_route(const AttentionArgs& a) {
  const bool mass = (a.seg_mass != nullptr && a.n_seg > 0 && a.n_q > 0) || (a.key_mass != nullptr && a.n_kv > 0);
  // Few query vectors per KV head (decode, short questions): split-K — but under
  // RAGKV_CUDA_ATTENTION=f32, which keeps every call on the f32 kernel.
  if (attention_mma_enabled() && a.n_head > 0 && a.n_kv_head > 0 &&
      attention_decode_applies(a.n_q * (a.n_head / a.n_kv_head), a.n_kv, mass))
    return AttentionRoute::split_k;
  // f16 K/V and no mass (prefill, recompute rows, questions): the tensor-core kernel.
  if (attention_mma_applies(a, mass)) return AttentionRoute::mma;
  // Key totals (prophet's question attention) or segment mass (Cache-Craft's) on f16 K/V: the
  // same kernel, then a pass over its logits.
  if (mass && attention_mma_applies(a, false))
    return a.key_mass != nullptr ? AttentionRoute::mma_key_mass : AttentionRoute::mma_segment_mass;
  return mass ? AttentionRoute::f32_mass : AttentionRoute::f32;
}

void attention_cuda(const AttentionArgs& a, cudaStream_t stream) {
  const int hd = a.head_dim;
  if (hd != 32 && hd != 64 && hd != 128 && hd != 256)
    attention_fail("attention_cuda: head_dim %d is not supported (expected 32, 64, 128 or 256)", hd);
  if (a.n_head <= 0 || a.n_kv_head <= 0 || a.n_head % a.n_kv_head != 0 || a.n_kv_head > 65535)
    attention_fail("attention_cuda: %d query heads cannot share %d KV heads", a.n_head, a.n_kv_head);
  if (a.n_q < 0 || a.n_kv < 0)
    attention_fail("attention_cuda: negative sizes n_q %lld, n_kv %lld", (long long)a.n_q, (long long)a.n_kv);
  if (a.sliding_window > 0 && !a.causal)
    attention_fail("attention_cuda: a sliding window (%d) needs causal attention", a.sliding_window);
  if (a.seg_mass != nullptr && (a.n_seg < 0 || a.n_seg >= INT_MAX / 2 || (a.n_seg > 0 && a.seg_begin == nullptr)))
    attention_fail("attention_cuda: segment mass needs seg_begin [n_seg + 1], got n_seg %d%s", a.n_seg,
                   a.seg_begin == nullptr ? " and no seg_begin" : "");
  if (a.n_q > 0 && (a.q == nullptr || a.out == nullptr || (a.causal && a.q_pos == nullptr)))
    attention_fail("attention_cuda: %lld queries need q, out%s", (long long)a.n_q, a.causal ? " and q_pos" : "");
  if (a.n_kv > 0 && (a.k == nullptr || a.v == nullptr || (a.causal && a.k_pos == nullptr)))
    attention_fail("attention_cuda: %lld keys need k, v%s", (long long)a.n_kv, a.causal ? " and k_pos" : "");
  if ((a.n_q > 0 && (misaligned(a.q) || misaligned(a.out))) || (a.n_kv > 0 && (misaligned(a.k) || misaligned(a.v))))
    attention_fail("attention_cuda: q, k, v and out must be 16-byte aligned");

  if (a.key_mass != nullptr && a.seg_mass != nullptr)
    attention_fail("attention_cuda: key totals and segment mass are exclusive");
  if (a.n_kv_device != nullptr && attention_route(a) != AttentionRoute::split_k)
    attention_fail("attention_cuda: a key count on the device is for the split-K route only");
  if (a.q8_block != 0 &&
      (attention_route(a) != AttentionRoute::split_k || (a.q8_block != 32 && a.q8_block != 256) ||
       (int64_t(a.n_head) * hd) % a.q8_block != 0 || a.q8.q == nullptr || a.q8.d == nullptr ||
       (a.q8_block == 32 ? a.q8.dsum == nullptr : a.q8.bsum == nullptr)))
    attention_fail("attention_cuda: 8-bit blocks of %d values of the output need the split-K route, a row of whole "
                   "blocks and their arrays", a.q8_block);
  if (a.key_mass_first_row < 0 || a.key_mass_first_row > a.n_q || (a.key_mass_first_row > 0 && a.key_mass == nullptr))
    attention_fail("attention_cuda: key totals from query row %lld of %lld%s", (long long)a.key_mass_first_row,
                   (long long)a.n_q, a.key_mass == nullptr ? " without key_mass" : "");
  const bool with_mass = a.seg_mass != nullptr && a.n_seg > 0 && a.n_q > 0;
  if (with_mass)
    CUDA_CHECK(cudaMemsetAsync(a.seg_mass, 0, size_t(a.n_q) * size_t(a.n_head) * size_t(a.n_seg) * sizeof(float),
                               stream));
  const bool with_key_mass = a.key_mass != nullptr && a.n_kv > 0;
  if (with_key_mass) CUDA_CHECK(cudaMemsetAsync(a.key_mass, 0, size_t(a.n_kv) * sizeof(float), stream));
  if (a.n_q == 0) return;

  const int group = a.n_head / a.n_kv_head;
  Params p{};
  p.q = a.q;
  p.q_pos = a.q_pos;
  p.k = a.k;
  p.v = a.v;
  p.k_pos = a.k_pos;
  p.out = a.out;
  p.seg_begin = with_mass ? a.seg_begin : nullptr;
  p.seg_mass = with_mass ? a.seg_mass : nullptr;
  p.key_mass = with_key_mass ? a.key_mass : nullptr;
  p.mass_vec_begin = a.key_mass_first_row * group;
  p.n_kv = a.n_kv;
  p.n_vec = a.n_q * group;
  p.q_cols = int64_t(a.n_head) * hd;
  p.kv_cols = int64_t(a.n_kv_head) * hd;
  p.n_head = a.n_head;
  p.group = group;
  p.n_seg = with_mass ? a.n_seg : 0;
  p.window = a.causal ? a.sliding_window : 0;
  p.scale = a.scale;
  p.softcap = a.softcap;
  p.causal = a.causal;

  switch (attention_route(a)) {
    case AttentionRoute::split_k: attention_decode_cuda(a, stream); return;
    case AttentionRoute::mma: attention_mma_cuda(a, stream); return;
    case AttentionRoute::mma_key_mass: attention_mma_key_mass_cuda(a, stream); return;
    case AttentionRoute::mma_segment_mass: attention_mma_segment_mass_cuda(a, stream); return;
    case AttentionRoute::f32: case AttentionRoute::f32_mass: break;
  }
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  // M = 16 vectors per block when 64 would leave SMs idle (few query rows).
  const bool small_m = (p.n_vec + 63) / 64 * a.n_kv_head < sms;

  switch (hd) {
    case 32: launch_head_dim<32>(p, a.n_kv_head, a.kv_f16, small_m, stream); break;
    case 64: launch_head_dim<64>(p, a.n_kv_head, a.kv_f16, small_m, stream); break;
    case 128: launch_head_dim<128>(p, a.n_kv_head, a.kv_f16, small_m, stream); break;
    default: launch_head_dim<256>(p, a.n_kv_head, a.kv_f16, small_m, stream); break;
  }
}

}  // namespace ragkv
