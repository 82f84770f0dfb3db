// Row copies through index lists (gather_rows, scatter_rows) and the per-row squared distance
// (row_sq_dist).
//
// Copies: blocks over (row pair k, chunk of kChunk columns, and which of two copies through the
// same index lists: a layer's K and V in one launch); consecutive threads copy
// consecutive elements of one row, so reads and writes are coalesced. Row offsets are int64
// (a KV buffer of n_ctx · n_kv_head · head_dim elements can exceed 2^31). Each destination
// element is written by exactly one thread: the host removes duplicate destination rows first
// (the last write wins, as in the CPU backend's sequential loop), so there is no race. f32 → f16
// is __float2half_rn, bit for bit the host's fp32_to_fp16 (round to nearest even, overflow to inf).
//
// Distance: a row's squares are summed by one warp (rows shorter than 1024, e.g. the K/V rows
// n_kv_head · head_dim of the small models: kRowsPerBlock rows per block, no shared memory) or
// by one 256-thread block (longer rows: warp shuffles plus one shared-memory hop), as rms-norm.cu
// does. Each thread adds its strided slice serially, then the tree reduction combines slices.
// Numerics against the CPU (which forms a − b and sums in double): here the difference is an f32
// subtraction and the sum is f32. All terms are non-negative, so there is no cancellation and the
// relative error is at most ~(cols/threads + log2(threads) + 2) f32 ulp: ≤ 42 · 2^-24 < 3e-6 for
// rows up to 8192.
#include <algorithm>

#include "cuda/block-reduce.cuh"
#include "cuda/cuda-check.h"
#include "cuda/rows.cuh"

namespace ragkv {

namespace {

constexpr int kBlock = 256;
constexpr int64_t kChunk = 1024;            // columns per copy block
constexpr int64_t kMaxChunkBlocks = 65535;  // gridDim.y limit
constexpr int kRowsPerBlock = kBlock / 32;  // distance: one warp per row

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__half* p, float v) { *p = __float2half_rn(v); }

// One copy per blockIdx.z: the first through src0 → dst0, the second (a layer's V beside its K)
// through src1 → dst1, with the same index lists.
template <typename Dst>
__global__ void copy_rows_kernel(const float* __restrict__ src0, const float* __restrict__ src1,
                                 const int32_t* __restrict__ src_rows, Dst* __restrict__ dst0, Dst* __restrict__ dst1,
                                 const int32_t* __restrict__ dst_rows, int64_t cols) {
  const int64_t k = blockIdx.x;
  const int64_t s = src_rows ? src_rows[k] : k;
  const int64_t d = dst_rows ? dst_rows[k] : k;
  const float* from = (blockIdx.z == 0 ? src0 : src1) + s * cols;
  Dst* to = (blockIdx.z == 0 ? dst0 : dst1) + d * cols;
  const int64_t n_chunks = (cols + kChunk - 1) / kChunk;
  for (int64_t chunk = blockIdx.y; chunk < n_chunks; chunk += gridDim.y) {
    const int64_t end = (chunk + 1) * kChunk < cols ? (chunk + 1) * kChunk : cols;
    for (int64_t j = chunk * kChunk + threadIdx.x; j < end; j += blockDim.x) store(to + j, from[j]);
  }
}

// src1/dst1 null: one copy.
template <typename Dst>
void copy_rows_launch(const float* src0, const float* src1, const int32_t* src_rows, Dst* dst0, Dst* dst1,
                      const int32_t* dst_rows, int64_t n, int64_t cols, cudaStream_t stream) {
  if (n == 0 || cols == 0) return;
  const int64_t n_chunks = (cols + kChunk - 1) / kChunk;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(std::min(n_chunks, kMaxChunkBlocks)),
                  src1 ? 2u : 1u);
  copy_rows_kernel<Dst><<<grid, kBlock, 0, stream>>>(src0, src1, src_rows, dst0, dst1, dst_rows, cols);
  CUDA_CHECK(cudaGetLastError());
}

// Σ over this thread's slice (columns lane, lane + stride, ...) of (a − b)².
template <typename B>
__device__ __forceinline__ float slice_sq_dist(const float* a, const B* b, int64_t cols, int first,
                                               int stride) {
  float acc = 0.f;
  for (int64_t c = first; c < cols; c += stride) {
    const float d = a[c] - to_f32(b[c]);
    acc += d * d;
  }
  return acc;
}

// One warp per row, kRowsPerBlock rows per block. Warps past the last row exit as a whole, so
// the full-mask shuffles never see an absent lane.
template <typename B>
__global__ void row_sq_dist_warp_kernel(const float* __restrict__ a, const B* __restrict__ b,
                                        const int32_t* __restrict__ rows, float* __restrict__ out,
                                        int64_t n, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (i >= n) return;
  const int lane = threadIdx.x % 32;
  float acc = slice_sq_dist(a + i * cols, b + static_cast<int64_t>(rows[i]) * cols, cols, lane, 32);
  acc = warp_reduce(acc);
  if (lane == 0) out[i] = acc;
}

// One block of kBlock threads per row.
template <typename B>
__global__ void row_sq_dist_block_kernel(const float* __restrict__ a, const B* __restrict__ b,
                                         const int32_t* __restrict__ rows, float* __restrict__ out,
                                         int64_t cols) {
  const int64_t i = blockIdx.x;
  float acc = slice_sq_dist(a + i * cols, b + static_cast<int64_t>(rows[i]) * cols, cols,
                            static_cast<int>(threadIdx.x), kBlock);
  __shared__ float partial[kBlock / 32];
  acc = block_reduce<kBlock>(acc, partial);
  if (threadIdx.x == 0) out[i] = acc;
}

template <typename B>
void row_sq_dist_launch(const float* a, const B* b, const int32_t* rows, float* out, int64_t n,
                        int64_t cols, cudaStream_t stream) {
  if (n == 0) return;
  if (cols < 1024) {
    const auto blocks = static_cast<unsigned>((n + kRowsPerBlock - 1) / kRowsPerBlock);
    row_sq_dist_warp_kernel<B><<<blocks, kBlock, 0, stream>>>(a, b, rows, out, n, cols);
  } else {
    row_sq_dist_block_kernel<B><<<static_cast<unsigned>(n), kBlock, 0, stream>>>(a, b, rows, out, cols);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void copy_rows_f32_cuda(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows,
                        int64_t n, int64_t cols, cudaStream_t stream) {
  copy_rows_launch<float>(src, nullptr, src_rows, dst, nullptr, dst_rows, n, cols, stream);
}

void copy_rows_f32_to_f16_cuda(const float* src, const int32_t* src_rows, __half* dst,
                               const int32_t* dst_rows, int64_t n, int64_t cols, cudaStream_t stream) {
  copy_rows_launch<__half>(src, nullptr, src_rows, dst, nullptr, dst_rows, n, cols, stream);
}

void copy_rows_pair_f32_cuda(const float* src0, const float* src1, const int32_t* src_rows, float* dst0, float* dst1,
                             const int32_t* dst_rows, int64_t n, int64_t cols, cudaStream_t stream) {
  copy_rows_launch<float>(src0, src1, src_rows, dst0, dst1, dst_rows, n, cols, stream);
}

void copy_rows_pair_f32_to_f16_cuda(const float* src0, const float* src1, const int32_t* src_rows, __half* dst0,
                                    __half* dst1, const int32_t* dst_rows, int64_t n, int64_t cols,
                                    cudaStream_t stream) {
  copy_rows_launch<__half>(src0, src1, src_rows, dst0, dst1, dst_rows, n, cols, stream);
}

void row_sq_dist_f32_cuda(const float* a, const float* b, const int32_t* rows, float* out, int64_t n,
                          int64_t cols, cudaStream_t stream) {
  row_sq_dist_launch(a, b, rows, out, n, cols, stream);
}

void row_sq_dist_f16_cuda(const float* a, const __half* b, const int32_t* rows, float* out, int64_t n,
                          int64_t cols, cudaStream_t stream) {
  row_sq_dist_launch(a, b, rows, out, n, cols, stream);
}

}  // namespace ragkv
