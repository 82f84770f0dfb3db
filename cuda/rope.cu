// Rotary position embedding (RoFormer, Su et al. 2021, §3.4.2), in place, f32 or f16 storage.
//
// One thread per rotated pair: the grid covers rows × n_heads × n_rot/2 threads; each computes
// θ = (pos · freq_scale) · inv_freq[i], sin and cos, and rotates its pair (by −θ when inverse).
// Dimensions ≥ n_rot are never touched. rope_qk rotates a layer's Q and K in one launch, Q's pairs
// first, each pair exactly as alone. f16 values are widened to f32, rotated, and rounded back
// to nearest even, as the CPU backend does. rope_qk_scatter_kv adds the scatter of the layer's
// new K and V rows into the cache to the same launch: each K pair stored into its cache row as it
// is rotated (the value the scatter would read back), K's unrotated dimensions and V copied — the
// values of rope_qk then scatter_kv_rows (rows.cu's copy), bit for bit.
//
// Agreement with the CPU reference (core/backend/cpu-backend.cpp) rests on computing the same float θ:
// the host computes the inv_freq table exactly as the CPU backend does (double pow, divided by
// the freq factor, rounded to f32), and here θ is the same two float products (rope-math.cuh,
// shared with the QKV GEMV's rotating store). sinf/cosf are
// the accurate versions (no --use_fast_math: their full range reduction matters, as θ reaches
// thousands of radians at long positions), so results differ from the CPU by a few f32 ulp.
#include "cuda/cuda-check.h"
#include "cuda/rope-math.cuh"
#include "cuda/rope.cuh"

namespace ragkv {

namespace {

__device__ __forceinline__ float load_f32(const float* p) { return *p; }
__device__ __forceinline__ float load_f32(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void store_f32(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f32(__half* p, float v) { *p = __float2half_rn(v); }

// Rotates pair t (of rows × n_heads × half) of x in place; with at, also says where its two
// elements are in x (at[0], at[1]) and what was stored there (out[0], out[1], before any rounding
// to T).
template <typename T>
__device__ __forceinline__ void rotate_pair(T* __restrict__ x, int64_t t, const int32_t* __restrict__ positions,
                                            const float* __restrict__ inv_freq, int n_heads, int head_dim, int half,
                                            float freq_scale, bool neox, float sign, int64_t* at = nullptr,
                                            float* out = nullptr) {
  const int i = static_cast<int>(t % half);
  const int64_t head = t / half;  // row · n_heads + h
  const int64_t row = head / n_heads;

  float c, s;
  rope_cos_sin(positions[row], freq_scale, inv_freq[i], sign, c, s);

  T* v = x + head * head_dim;
  const int i0 = neox ? i : 2 * i;
  const int i1 = neox ? i + half : 2 * i + 1;
  const float a = load_f32(v + i0), b = load_f32(v + i1);
  float r0, r1;
  rope_rotate(a, b, c, s, r0, r1);
  store_f32(v + i0, r0);
  store_f32(v + i1, r1);
  if (at) {
    at[0] = head * head_dim + i0;
    at[1] = head * head_dim + i1;
    out[0] = r0;
    out[1] = r1;
  }
}

template <typename T>
__global__ void rope_kernel(T* __restrict__ x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t n_pairs, int n_heads,
                            int head_dim, int half, float freq_scale, bool neox, float sign) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n_pairs) return;
  rotate_pair(x, t, positions, inv_freq, n_heads, head_dim, half, freq_scale, neox, sign);
}

// Q's pairs, then K's: each pair rotated as rope_kernel rotates it.
template <typename T>
__global__ void rope_qk_kernel(T* __restrict__ q, T* __restrict__ k, const int32_t* __restrict__ positions,
                               const float* __restrict__ inv_freq, int64_t q_pairs, int64_t k_pairs, int q_heads,
                               int k_heads, int head_dim, int half, float freq_scale, bool neox) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < q_pairs) rotate_pair(q, t, positions, inv_freq, q_heads, head_dim, half, freq_scale, neox, 1.f);
  else if (t < q_pairs + k_pairs)
    rotate_pair(k, t - q_pairs, positions, inv_freq, k_heads, head_dim, half, freq_scale, neox, 1.f);
}

// rope_qk_kernel's rotation of Q and K (f32), then K and V rows r to the cache rows dst_rows[r]
// of k_dst and v_dst: threads over Q's pairs, K's pairs (each stored to the cache as rotated),
// K's dimensions past n_rot, then V's elements.
template <typename Dst>
__global__ void rope_qk_scatter_kv_kernel(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                                          const int32_t* __restrict__ positions, const float* __restrict__ inv_freq,
                                          int64_t q_pairs, int64_t k_pairs, int64_t k_rest, int64_t v_elems,
                                          int q_heads, int k_heads, int head_dim, int half, float freq_scale,
                                          bool neox, const int32_t* __restrict__ dst_rows, Dst* __restrict__ k_dst,
                                          Dst* __restrict__ v_dst) {
  int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t kv_cols = int64_t(k_heads) * head_dim;
  if (t < q_pairs) {
    rotate_pair(q, t, positions, inv_freq, q_heads, head_dim, half, freq_scale, neox, 1.f);
    return;
  }
  t -= q_pairs;
  if (t < k_pairs) {
    int64_t at[2];
    float val[2];
    rotate_pair(k, t, positions, inv_freq, k_heads, head_dim, half, freq_scale, neox, 1.f, at, val);
    Dst* row = k_dst + int64_t(dst_rows[at[0] / kv_cols]) * kv_cols;
    store_f32(row + at[0] % kv_cols, val[0]);
    store_f32(row + at[1] % kv_cols, val[1]);
    return;
  }
  t -= k_pairs;
  if (t < k_rest) {  // dimensions [2·half, head_dim) of each K head, unrotated
    const int64_t per_head = head_dim - 2 * half;
    const int64_t e = (t / per_head) * head_dim + 2 * half + t % per_head;
    store_f32(k_dst + int64_t(dst_rows[e / kv_cols]) * kv_cols + e % kv_cols, k[e]);
    return;
  }
  t -= k_rest;
  if (t < v_elems) store_f32(v_dst + int64_t(dst_rows[t / kv_cols]) * kv_cols + t % kv_cols, v[t]);
}

template <typename T>
void rope_launch(T* x, const int32_t* positions, const float* inv_freq, const RopeShape& s,
                 cudaStream_t stream) {
  const int half = s.n_rot / 2;
  const int64_t n_pairs = s.rows * s.n_heads * half;
  if (n_pairs == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = (n_pairs + kBlock - 1) / kBlock;
  rope_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      x, positions, inv_freq, n_pairs, s.n_heads, s.head_dim, half, s.freq_scale, s.neox,
      s.inverse ? -1.f : 1.f);
  CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void rope_qk_launch(T* q, T* k, int k_heads, const int32_t* positions, const float* inv_freq, const RopeShape& s,
                    cudaStream_t stream) {
  const int half = s.n_rot / 2;
  const int64_t q_pairs = s.rows * s.n_heads * half, k_pairs = s.rows * k_heads * half;
  if (q_pairs + k_pairs == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = (q_pairs + k_pairs + kBlock - 1) / kBlock;
  rope_qk_kernel<T><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      q, k, positions, inv_freq, q_pairs, k_pairs, s.n_heads, k_heads, s.head_dim, half, s.freq_scale, s.neox);
  CUDA_CHECK(cudaGetLastError());
}

template <typename Dst>
void rope_qk_scatter_kv_launch(float* q, float* k, const float* v, int k_heads, const int32_t* positions,
                               const float* inv_freq, const RopeShape& s, const int32_t* dst_rows, Dst* k_dst,
                               Dst* v_dst, cudaStream_t stream) {
  const int half = s.n_rot / 2;
  const int64_t q_pairs = s.rows * s.n_heads * half, k_pairs = s.rows * k_heads * half;
  const int64_t k_rest = s.rows * k_heads * (s.head_dim - 2 * half), v_elems = s.rows * k_heads * s.head_dim;
  const int64_t total = q_pairs + k_pairs + k_rest + v_elems;
  if (total == 0) return;
  constexpr int kBlock = 256;
  const int64_t blocks = (total + kBlock - 1) / kBlock;
  if (blocks > INT32_MAX) cuda_internal_fail("rope_qk_scatter_kv_cuda: more blocks than one grid dimension holds");
  rope_qk_scatter_kv_kernel<Dst><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(
      q, k, v, positions, inv_freq, q_pairs, k_pairs, k_rest, v_elems, s.n_heads, k_heads, s.head_dim, half,
      s.freq_scale, s.neox, dst_rows, k_dst, v_dst);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void rope_qk_scatter_kv_cuda(float* q, float* k, const float* v, int k_heads, const int32_t* positions,
                             const float* inv_freq, const RopeShape& s, const int32_t* dst_rows, void* k_dst,
                             void* v_dst, bool dst_f16, cudaStream_t stream) {
  if (dst_f16)
    rope_qk_scatter_kv_launch(q, k, v, k_heads, positions, inv_freq, s, dst_rows, static_cast<__half*>(k_dst),
                              static_cast<__half*>(v_dst), stream);
  else
    rope_qk_scatter_kv_launch(q, k, v, k_heads, positions, inv_freq, s, dst_rows, static_cast<float*>(k_dst),
                              static_cast<float*>(v_dst), stream);
}

void rope_f32_cuda(float* x, const int32_t* positions, const float* inv_freq, const RopeShape& s,
                   cudaStream_t stream) {
  rope_launch(x, positions, inv_freq, s, stream);
}

void rope_f16_cuda(__half* x, const int32_t* positions, const float* inv_freq, const RopeShape& s,
                   cudaStream_t stream) {
  rope_launch(x, positions, inv_freq, s, stream);
}

void rope_qk_f32_cuda(float* q, float* k, int k_heads, const int32_t* positions, const float* inv_freq,
                      const RopeShape& s, cudaStream_t stream) {
  rope_qk_launch(q, k, k_heads, positions, inv_freq, s, stream);
}

void rope_qk_f16_cuda(__half* q, __half* k, int k_heads, const int32_t* positions, const float* inv_freq,
                      const RopeShape& s, cudaStream_t stream) {
  rope_qk_launch(q, k, k_heads, positions, inv_freq, s, stream);
}

}  // namespace ragkv
