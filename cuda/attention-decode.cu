// Split-K attention for decode steps and short questions (flash-decoding: Dao et al., "Flash-
// Decoding for long-context inference", 2023): when a KV head has few query vectors (n_q · group
// ≤ kDecodeMaxVectors) attention.cu's kernel would give it one block walking every key; here the
// keys, however many, are split into ranges of kSplitKeys rows, one block per (KV head, range), and a second
// kernel combines the ranges' partial softmax sums. Same semantics and masks as attention.cu
// (scale · q·k, softcap, then −∞ for keys past n_kv or invisible by position and window); no
// segment mass or key totals (those calls keep attention.cu's kernel).
//
// Partial kernel, block (KV head g, range r), 256 threads = kSplitKeys:
//   1. the group's query vectors (row i, head g · group + hg) to shared memory, f32;
//   2. thread j scores key k0 + j against every vector: a sequential f32 dot product over
//      head_dim (fmaf in dimension order), K read as 16-byte vectors;
//   3. warp t (one per vector) takes the range's max m and sum l of P = exp(S − m) (expf),
//      writing P back to shared memory;
//   4. threads over (vector, dimension) accumulate O = Σ_j P_j · V_j (V rows read coalesced).
//   m, l and the unnormalised O of the range go to a workspace (the caller's decode_work, else
//   cudaMallocAsync on the stream).
// Combine: M = max over ranges of m, L = Σ l_r · exp(m_r − M), O = Σ O_r · exp(m_r − M), out = O / L
// (0 when no key is visible: L = 0). By the partial kernel itself: each block, its sums stored,
// counts itself on its KV head's counter (AttentionArgs::decode_done; last-block.cuh, the CUDA
// programming guide's threadFenceReduction pattern), and the last one of the
// head reads every range's sums from L2 and combines its head's vectors — no second launch (one
// per layer of a decode step), the same arithmetic. With AttentionArgs::q8_block (a decode step
// whose output the O projection reads next on 8-bit blocks) it also quantises them
// (act-quantize.cuh), where a head group's values are whole blocks of each row. Else a combine
// kernel: one block per (query row, head), head_dim threads; with q8_block one block per (query
// row, max(1, B / head_dim) heads), the values quantised block by block as they are stored.
//
// With n_kv_device (a replayed step graph) the key count is read on the device and the grid covers
// AttentionArgs::n_kv, a bound on it: a range past the count scores no key (m = −∞, l = 0, O = 0),
// which the combine adds as exact zeros — the same bits as a grid of the count's own ranges (up
// to the sign of an output that is exactly zero: −0 + 0 is +0).
//
// Numerics: f32 throughout, as attention.cu — the logits are the same dot products in the same
// order; the softmax is normalised once per range and once in the combine instead of rescaled per
// 32-key tile, so the two kernels differ by a few ulp (tests/test-cuda-attention.cpp holds both to
// the same tolerance against the CPU).
#include <cuda_fp16.h>
#include <math_constants.h>

#include <climits>
#include <cstdint>

#include "cuda/act-quantize.cuh"
#include "cuda/attention-decode.cuh"
#include "cuda/cuda-check.h"
#include "cuda/last-block.cuh"

namespace ragkv {

namespace {

constexpr int kSplitKeys = 256;  // keys per block, one per thread
constexpr int kWarps = kSplitKeys / 32;
static_assert(kDecodeMaxVectors <= kWarps, "one warp per query vector in the softmax step");

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

// Eight consecutive K values of a row as f32 (one 16-byte load of halves, or two of floats).
__device__ __forceinline__ void load8(const __half* p, float* out) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(h[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float* out) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

// The sizes attention_cuda's arguments imply.
struct Shape {
  int64_t q_cols, kv_cols;
  int group, n_vec;
};

__host__ __device__ inline Shape shape_of(const AttentionArgs& a) {
  const int group = a.n_head / a.n_kv_head;
  return {int64_t(a.n_head) * a.head_dim, int64_t(a.n_kv_head) * a.head_dim, group, int(a.n_q) * group};
}

// Output value d of vector vh = row · n_head + head from the ranges' partial sums, read through
// Load (plain in the combine kernel; from L2 in the partial kernel's last block, whose sums other
// blocks of the same launch wrote: the same values).
struct PlainLoad {
  __device__ __forceinline__ float operator()(const float* p) const { return *p; }
};
struct L2Load {
  __device__ __forceinline__ float operator()(const float* p) const { return __ldcg(p); }
};
template <int D, typename Load = PlainLoad>
__device__ __forceinline__ float combine_ranges(const AttentionArgs& p, int n_ranges, const float* __restrict__ part_o,
                                                const float* __restrict__ part_ml, int64_t vh, int d) {
  const Load load;
  const int64_t stride = p.n_q * p.n_head;
  float m = -CUDART_INF_F;
  for (int r = 0; r < n_ranges; ++r) m = fmaxf(m, load(part_ml + 2 * (r * stride + vh)));
  const float m_ref = m == -CUDART_INF_F ? 0.f : m;
  float l = 0.f, o = 0.f;
  for (int r = 0; r < n_ranges; ++r) {
    const float w = expf(load(part_ml + 2 * (r * stride + vh)) - m_ref);
    l = fmaf(load(part_ml + 2 * (r * stride + vh) + 1), w, l);
    o = fmaf(load(part_o + (r * stride + vh) * D + d), w, o);
  }
  return l > 0.f ? o / l : 0.f;
}

// The combine of KV head g's vectors (rows × its query heads) by the partial kernel's last block:
// each value as the combine kernel computes it, stored to out; with B > 0 they pass through
// `values` (the block's score tile, free by now) and each row's group · D values — whole blocks of
// B (launch checks it) — are quantised warp by warp as decode_combine_q8_kernel quantises them.
template <int D, int B>
__device__ void combine_in_last_block(const AttentionArgs& p, int g, const float* part_o, const float* part_ml,
                                      float (&values)[kDecodeMaxVectors][kSplitKeys]) {
  const Shape sh = shape_of(p);
  const int tid = threadIdx.x, n_ranges = int(gridDim.y);
  for (int idx = tid; idx < sh.n_vec * D; idx += kSplitKeys) {
    const int t = idx / D, d = idx % D;
    const int64_t row = t / sh.group;
    const int head = g * sh.group + t % sh.group;
    const float value = combine_ranges<D, L2Load>(p, n_ranges, part_o, part_ml, row * p.n_head + head, d);
    p.out[row * sh.q_cols + int64_t(head) * D + d] = value;
    if constexpr (B > 0) values[t][d] = value;
  }
  if constexpr (B > 0) {
    __syncthreads();
    constexpr int V = B / 32;
    const int lane = tid % 32;
    const int per_row = sh.group * D / B;  // blocks of a row's group · D values
    for (int qb = tid / 32; qb < int(p.n_q) * per_row; qb += kSplitKeys / 32) {
      const int64_t row = qb / per_row;
      const int first = (qb % per_row) * B;  // in the row's group · D values, ordered (head, d)
      float v[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const int c = first + lane * V + i;
        v[i] = values[row * sh.group + c / D][c % D];
      }
      quantize_act_block<B>(v, lane, (row * sh.q_cols + int64_t(g) * sh.group * D + first) / B, p.q8);
    }
  }
}

// kCombine: kSeparate (the combine kernel follows), or the last block of each KV head to finish
// combines its vectors (combine_in_last_block), quantising them in blocks of kCombine values
// (32 or 256; 0: not quantised).
constexpr int kSeparate = -1;
constexpr int64_t kLastBlockMaxRanges = 64;  // 16,384 keys

template <int D, typename T, int kCombine>
__global__ void __launch_bounds__(kSplitKeys) decode_partial_kernel(AttentionArgs p, float* __restrict__ part_o,
                                                                    float* __restrict__ part_ml) {
  __shared__ float q_s[kDecodeMaxVectors][D];
  __shared__ float p_s[kDecodeMaxVectors][kSplitKeys];
  __shared__ int qpos_s[kDecodeMaxVectors];

  const int g = blockIdx.x, r = blockIdx.y, tid = threadIdx.x;
  const Shape sh = shape_of(p);
  const int n_vec = sh.n_vec, group = sh.group;
  const int window = p.sliding_window;
  const int64_t k0 = int64_t(r) * kSplitKeys;
  const int64_t n_kv = p.n_kv_device ? int64_t(*p.n_kv_device) : p.n_kv;
  const int n_keys = int(max(int64_t(0), min(int64_t(kSplitKeys), n_kv - k0)));
  const T* k = static_cast<const T*>(p.k);
  const T* v = static_cast<const T*>(p.v);

  // 1. Query vectors t = row · group + hg of KV head g.
  for (int idx = tid; idx < n_vec * D; idx += kSplitKeys) {
    const int t = idx / D, d = idx % D;
    const int64_t row = t / group;
    const int head = g * group + t % group;
    q_s[t][d] = p.q[row * sh.q_cols + int64_t(head) * D + d];
  }
  if (tid < n_vec) qpos_s[tid] = p.causal ? p.q_pos[tid / group] : 0;
  __syncthreads();

  // 2. Scores of key k0 + tid.
  if (tid < n_keys) {
    const int64_t key = k0 + tid;
    const T* kr = k + key * sh.kv_cols + int64_t(g) * D;
    float dot[kDecodeMaxVectors];
#pragma unroll
    for (int t = 0; t < kDecodeMaxVectors; ++t) dot[t] = 0.f;
    for (int d = 0; d < D; d += 8) {
      float kv[8];
      load8(kr + d, kv);
#pragma unroll
      for (int t = 0; t < kDecodeMaxVectors; ++t) {
        if (t < n_vec) {
          float acc = dot[t];
#pragma unroll
          for (int i = 0; i < 8; ++i) acc = fmaf(q_s[t][d + i], kv[i], acc);
          dot[t] = acc;
        }
      }
    }
    const int kp = p.causal ? p.k_pos[key] : 0;
    // Unrolled over the constant bound, so that dot[] stays in registers (a loop to n_vec would
    // index it at run time and put it in local memory).
#pragma unroll
    for (int t = 0; t < kDecodeMaxVectors; ++t) {
      if (t >= n_vec) break;
      bool vis = true;
      if (p.causal) vis = kp <= qpos_s[t] && (window <= 0 || int64_t(kp) > int64_t(qpos_s[t]) - window);
      float x = p.scale * dot[t];
      if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
      p_s[t][tid] = vis ? x : -CUDART_INF_F;
    }
  } else {
    for (int t = 0; t < n_vec; ++t) p_s[t][tid] = -CUDART_INF_F;
  }
  __syncthreads();

  // 3. The range's softmax, one warp per vector.
  const int warp = tid / 32, lane = tid % 32;
  if (warp < n_vec) {
    float m = -CUDART_INF_F;
    for (int j = lane; j < kSplitKeys; j += 32) m = fmaxf(m, p_s[warp][j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    const float m_ref = m == -CUDART_INF_F ? 0.f : m;
    float l = 0.f;
    for (int j = lane; j < kSplitKeys; j += 32) {
      const float e = expf(p_s[warp][j] - m_ref);
      p_s[warp][j] = e;
      l += e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (lane == 0) {
      const int64_t row = warp / group;
      const int head = g * group + warp % group;
      const int64_t slot = (int64_t(r) * p.n_q + row) * p.n_head + head;
      part_ml[2 * slot] = m;
      part_ml[2 * slot + 1] = l;
    }
  }
  __syncthreads();

  // 4. O of the range, unnormalised.
  for (int idx = tid; idx < n_vec * D; idx += kSplitKeys) {
    const int t = idx / D, d = idx % D;
    const T* vc = v + k0 * sh.kv_cols + int64_t(g) * D + d;
    float o = 0.f;
    for (int j = 0; j < n_keys; ++j) o = fmaf(p_s[t][j], to_f32(vc[int64_t(j) * sh.kv_cols]), o);
    const int64_t row = t / group;
    const int head = g * group + t % group;
    part_o[((int64_t(r) * p.n_q + row) * p.n_head + head) * D + d] = o;
  }
  if constexpr (kCombine != kSeparate) {
    // Counted once this block's sums are visible to every block; the last one counted combines.
    if (!last_block_to_finish(&p.decode_done[g], gridDim.y)) return;
    combine_in_last_block<D, kCombine>(p, g, part_o, part_ml, p_s);
  }
}

template <int D>
__global__ void __launch_bounds__(D) decode_combine_kernel(AttentionArgs p, int n_ranges, const float* __restrict__ part_o,
                                                           const float* __restrict__ part_ml) {
  const int64_t vh = blockIdx.x;  // row · n_head + head
  const int d = threadIdx.x;
  const int64_t row = vh / p.n_head, head = vh % p.n_head;
  p.out[row * shape_of(p).q_cols + head * D + d] = combine_ranges<D>(p, n_ranges, part_o, part_ml, vh, d);
}

// Heads per block of the quantising combine: a whole number of B-value blocks per block.
constexpr int combine_heads(int D, int B) { return B > D ? B / D : 1; }

// The combine with the output quantised (q8_block = B): block b covers vectors
// [b · H, (b + 1) · H) of one row (n_head · D is a multiple of B, so n_head of H), thread t value
// t % D of vector b · H + t / D — the row's H · D consecutive output values. B = 32: warp w holds
// one block, a value per lane, as quantize_act_block<32> takes it; B = 256 (H · D = 256): the
// values through shared memory to warp 0, eight per lane.
template <int D, int B>
__global__ void __launch_bounds__(D * combine_heads(D, B))
    decode_combine_q8_kernel(AttentionArgs p, int n_ranges, const float* __restrict__ part_o,
                             const float* __restrict__ part_ml) {
  constexpr int H = combine_heads(D, B);
  const int t = threadIdx.x;
  const int64_t vh = int64_t(blockIdx.x) * H + t / D;
  const int d = t % D;
  const int64_t row = vh / p.n_head, head = vh % p.n_head;
  const float value = combine_ranges<D>(p, n_ranges, part_o, part_ml, vh, d);
  const int64_t at = row * shape_of(p).q_cols + head * D + d;  // flat index in out [n_q][q_cols]
  p.out[at] = value;
  const int lane = t % 32;
  if constexpr (B == 32) {
    const float v[1] = {value};
    quantize_act_block<32>(v, lane, at / 32, p.q8);  // the warp's 32 values: one block
  } else {
    static_assert(B == 256 && H * D == 256, "a 256-value block per CUDA block");
    __shared__ float values[256];
    values[t] = value;
    __syncthreads();
    if (t < 32) {
      float v[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) v[i] = values[lane * 8 + i];
      quantize_act_block<256>(v, lane, (at - t) / 256, p.q8);
    }
  }
}

template <int D>
void launch_combine(const AttentionArgs& p, int n_ranges, const float* part_o, const float* part_ml,
                    cudaStream_t stream) {
  const int64_t vectors = p.n_q * p.n_head;
  if (p.q8_block == 0) {
    decode_combine_kernel<D><<<unsigned(vectors), D, 0, stream>>>(p, n_ranges, part_o, part_ml);
  } else if (p.q8_block == 32) {
    decode_combine_q8_kernel<D, 32><<<unsigned(vectors), D, 0, stream>>>(p, n_ranges, part_o, part_ml);
  } else {
    constexpr int H = combine_heads(D, 256);
    decode_combine_q8_kernel<D, 256><<<unsigned(vectors / H), D * H, 0, stream>>>(p, n_ranges, part_o, part_ml);
  }
}

template <int D, typename T>
void launch(const AttentionArgs& p, cudaStream_t stream) {
  const int64_t n_ranges = (p.n_kv + kSplitKeys - 1) / kSplitKeys;
  if (n_ranges > 65535) cuda_internal_fail("attention_decode_cuda: more key ranges than one grid dimension holds");
  const size_t slots = size_t(n_ranges) * size_t(p.n_q) * size_t(p.n_head);
  const size_t bytes = slots * (D + 2) * sizeof(float);
  const bool own = p.decode_work == nullptr || p.decode_work_bytes < bytes;
  float* work = own ? nullptr : static_cast<float*>(p.decode_work);
  if (own) CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&work), bytes, stream));
  float* part_o = work;
  float* part_ml = work + slots * D;
  const dim3 grid(unsigned(p.n_kv_head), unsigned(n_ranges));
  // The combine in each KV head's last block where its vectors' values are whole activation
  // blocks of each row (always, without quantisation); else the combine kernel.
  // Over many ranges the separate kernel's n_q · n_head blocks share the combine's work better than
  // the n_kv_head last blocks.
  const int group_values = (p.n_head / p.n_kv_head) * D;
  if (p.separate_combine || n_ranges > kLastBlockMaxRanges || (p.q8_block != 0 && group_values % p.q8_block != 0)) {
    decode_partial_kernel<D, T, kSeparate><<<grid, kSplitKeys, 0, stream>>>(p, part_o, part_ml);
    CUDA_CHECK(cudaGetLastError());
    launch_combine<D>(p, int(n_ranges), part_o, part_ml, stream);
  } else {
    AttentionArgs a = p;
    const bool own_done = a.decode_done == nullptr;  // counters of its own, zeroed (tests)
    if (own_done) {
      CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&a.decode_done), size_t(p.n_kv_head) * sizeof(unsigned),
                                 stream));
      CUDA_CHECK(cudaMemsetAsync(a.decode_done, 0, size_t(p.n_kv_head) * sizeof(unsigned), stream));
    }
    if (p.q8_block == 0)
      decode_partial_kernel<D, T, 0><<<grid, kSplitKeys, 0, stream>>>(a, part_o, part_ml);
    else if (p.q8_block == 32)
      decode_partial_kernel<D, T, 32><<<grid, kSplitKeys, 0, stream>>>(a, part_o, part_ml);
    else
      decode_partial_kernel<D, T, 256><<<grid, kSplitKeys, 0, stream>>>(a, part_o, part_ml);
    if (own_done) CUDA_CHECK(cudaFreeAsync(a.decode_done, stream));
  }
  CUDA_CHECK(cudaGetLastError());
  if (own) CUDA_CHECK(cudaFreeAsync(work, stream));
}

template <int D>
void launch_kv_type(const AttentionArgs& a, cudaStream_t stream) {
  if (a.kv_f16) launch<D, __half>(a, stream);
  else launch<D, float>(a, stream);
}

}  // namespace

bool attention_decode_applies(int64_t n_vec, int64_t n_kv, bool with_mass) {
  // Any number of keys: one range when there are few, so that a decode step takes this path from
  // its first key to its last (its kernels and parameters stay those of one step graph, and its
  // output can be quantised for the O projection in the combine).
  return !with_mass && n_vec >= 1 && n_vec <= kDecodeMaxVectors && n_kv >= 1;
}

size_t attention_decode_work_bytes(const AttentionArgs& a) {
  const int64_t n_ranges = (a.n_kv + kSplitKeys - 1) / kSplitKeys;
  return size_t(n_ranges) * size_t(a.n_q) * size_t(a.n_head) * size_t(a.head_dim + 2) * sizeof(float);
}

void attention_decode_cuda(const AttentionArgs& a, cudaStream_t stream) {
  if (a.n_q == 0) return;  // no block to launch
  if (a.n_kv < 1) cuda_internal_fail("attention_decode_cuda: no keys (attention_cuda gives such queries 0)");
  switch (a.head_dim) {
    case 32: launch_kv_type<32>(a, stream); break;
    case 64: launch_kv_type<64>(a, stream); break;
    case 128: launch_kv_type<128>(a, stream); break;
    case 256: launch_kv_type<256>(a, stream); break;
    default: cuda_internal_fail("attention_decode_cuda: head_dim not 32, 64, 128 or 256");
  }
}

}  // namespace ragkv
