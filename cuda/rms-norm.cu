// RMSNorm, one thread block per row (as ggml's rms_norm_f32 and llm.c's rmsnorm kernels).
//
// Each thread accumulates x² over a strided slice of the row, the block reduces with warp
// shuffles (plus one shared-memory hop across warps for blocks wider than a warp), then every
// thread scales its own slice. Short rows (< 1024, e.g. per-head QK-norm over head_dim and the
// hidden sizes of the small models) take one warp, which needs no shared memory and no
// __syncthreads; longer rows take 256 threads.
//
// In-place use (x == y) is safe: a thread reads and writes only its own elements, and it writes
// them only after the block-wide sum is complete. For the same reason x and y carry no
// __restrict__.
//
// add_rms_norm_f32_cuda fuses the residual add before it (x += y, then the norm of the new x);
// add_rms_norm_q8_cuda also quantises xn, as it is written, into the 8-bit activation blocks of the
// decode product that reads it next (act-quantize.cuh, the blocks int8-gemv.cu's quantize_act would
// make of xn): one launch instead of two, twice per layer of a decode step on quantised weights;
// add_rms_norm_f16_cuda writes a prefill GEMM's row-scaled f16 operand instead (convert.cu's), the
// pass over xn that conversion took saved twice per layer of a prefill.
//
// Numerics against the CPU reference (core/backend/cpu-backend.cpp, which sums in double): the sum of
// squares is a float tree reduction here, within a few ulp of the double sum for the row lengths
// the models use; then inv = 1 / sqrt(ss / n + eps) and y = x · inv · w in the same order.
#include <cfloat>

#include "cuda/act-quantize.cuh"
#include "cuda/block-reduce.cuh"
#include "cuda/cuda-check.h"
#include "cuda/f16-row-scale.cuh"
#include "cuda/rms-norm.cuh"

namespace ragkv {

namespace {

template <int kBlock>
__global__ void rms_norm_f32_kernel(const float* x, const float* __restrict__ w, float* y,
                                    int64_t cols, float eps) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block must be whole warps");
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
    const float v = xr[j];
    ss += v * v;
  }
  __shared__ float partial[kBlock / 32];
  ss = block_reduce<kBlock>(ss, partial);

  const float inv = 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) yr[j] = xr[j] * inv * w[j];
}

// The residual add of a row and its norm's scale: each thread adds its slice of yr into xr (the add
// kernel's one f32 add per element) and sums the squares of the new values in the same order as the
// kernel above; returns 1 / sqrt(mean square + eps), every thread the same.
template <int kBlock>
__device__ __forceinline__ float add_row_inv_rms(float* xr, const float* __restrict__ yr, int64_t cols, float eps) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block must be whole warps");
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
    const float v = xr[j] + yr[j];
    xr[j] = v;
    ss += v * v;
  }
  __shared__ float partial[kBlock / 32];
  ss = block_reduce<kBlock>(ss, partial);
  return 1.f / sqrtf(ss / static_cast<float>(cols) + eps);
}

// add then rms_norm in one pass (add_row_inv_rms, then the scaling): x and xn equal add_f32_cuda
// followed by rms_norm_f32_kernel bit for bit. xn may alias x.
template <int kBlock>
__global__ void add_rms_norm_f32_kernel(float* x, const float* __restrict__ y, const float* __restrict__ w, float* xn,
                                        int64_t cols, float eps) {
  const int64_t row = blockIdx.x;
  float* xr = x + row * cols;
  float* nr = xn + row * cols;
  const float inv = add_row_inv_rms<kBlock>(xr, y + row * cols, cols, eps);
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) nr[j] = xr[j] * inv * w[j];
}

// add_rms_norm_f32_kernel, then xn's values in blocks of B (32 or 256; cols a multiple of B): warp
// k of the block takes blocks k, k + kBlock / 32, … of the row, each lane computing its B / 32
// values of xn with the expression above (the same bits), storing them and quantising the block
// (quantize_act_block: the blocks quantize_act makes of the stored xn, bit for bit). A value is
// read from x and written to xn by the same lane, so xn may alias x.
template <int kBlock, int B>
__global__ void add_rms_norm_q8_kernel(float* x, const float* __restrict__ y, const float* __restrict__ w, float* xn,
                                       int64_t cols, float eps, const ActQ8Out q8) {
  constexpr int V = B / 32;
  const int64_t row = blockIdx.x;
  float* xr = x + row * cols;
  float* nr = xn + row * cols;
  const float inv = add_row_inv_rms<kBlock>(xr, y + row * cols, cols, eps);
  __syncthreads();  // x's new values, stored by other threads, are read below
  const int lane = threadIdx.x % 32;
  const int64_t blocks = cols / B;
  for (int64_t b = threadIdx.x / 32; b < blocks; b += kBlock / 32) {  // whole warps: the shuffles see 32 lanes
    const int64_t first = b * B + lane * V;
    float v[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      v[i] = xr[first + i] * inv * w[first + i];
      nr[first + i] = v[i];
    }
    quantize_act_block<B>(v, lane, row * blocks + b, q8);
  }
}

// add_rms_norm_f32_kernel, then xn as the f16 operand of the prefill GEMM that reads it next: the
// row's largest finite |xn|, its scale (f16_row_scale with the GEMM's ceiling and top) and
// xh = f16(xn · scale), row_unscale = 1 / scale — what convert.cu's rows_f32_to_f16_scaled_kernel
// makes of the stored xn, bit for bit (the same thread count, a max exact in any order), in the
// same pass. Each thread reads back only the xn values it stored, so xn may alias x.
template <int kBlock>
__global__ void add_rms_norm_f16_kernel(float* x, const float* __restrict__ y, const float* __restrict__ w, float* xn,
                                        int64_t cols, float eps, __half* __restrict__ xh,
                                        float* __restrict__ row_unscale, float ceiling, int top) {
  const int64_t row = blockIdx.x;
  float* xr = x + row * cols;
  float* nr = xn + row * cols;
  const float inv = add_row_inv_rms<kBlock>(xr, y + row * cols, cols, eps);
  float largest = 0.f;
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
    const float v = xr[j] * inv * w[j];
    nr[j] = v;
    const float a = fabsf(v);
    if (a <= FLT_MAX) largest = fmaxf(largest, a);  // false for inf and NaN
  }
  __shared__ float partial[kBlock / 32];
  largest = block_reduce<kBlock>(largest, partial, 0.f, MaxOp{});
  float scale, unscale;
  f16_row_scale(largest, scale, unscale, ceiling, top);
  __half* hr = xh + row * cols;
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) hr[j] = __float2half_rn(nr[j] * scale);
  if (threadIdx.x == 0) row_unscale[row] = unscale;
}

template <int B>
void add_rms_norm_q8_launch(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                            const ActQ8Out& q8, cudaStream_t stream) {
  // The thread count of add_rms_norm_f32_cuda: the sum of squares in the same order.
  if (cols < 1024)
    add_rms_norm_q8_kernel<32, B><<<static_cast<unsigned>(rows), 32, 0, stream>>>(x, y, w, xn, cols, eps, q8);
  else
    add_rms_norm_q8_kernel<256, B><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, y, w, xn, cols, eps, q8);
}

}  // namespace

void add_rms_norm_q8_cuda(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                          int block, const quant_dot::ActQ8Out& q8, cudaStream_t stream) {
  if ((block != 32 && block != 256) || cols % block != 0)
    cuda_internal_fail("add_rms_norm_q8_cuda: blocks of 32 or 256 values dividing the row");
  if (rows == 0 || cols == 0) return;
  if (block == 32)
    add_rms_norm_q8_launch<32>(x, y, w, xn, rows, cols, eps, q8, stream);
  else
    add_rms_norm_q8_launch<256>(x, y, w, xn, rows, cols, eps, q8, stream);
  CUDA_CHECK(cudaGetLastError());
}

void add_rms_norm_f16_cuda(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                           __half* xh, float* row_unscale, int product_top, cudaStream_t stream) {
  if (product_top > kF16RowTop) cuda_internal_fail("add_rms_norm_f16_cuda: product_top above 15");
  if (rows == 0 || cols == 0) return;
  float ceiling;
  int top;
  f16_row_limits(product_top, ceiling, top);
  // The thread counts of add_rms_norm_f32_cuda and of the operand conversion (the same rule).
  if (cols < 1024)
    add_rms_norm_f16_kernel<32><<<static_cast<unsigned>(rows), 32, 0, stream>>>(x, y, w, xn, cols, eps, xh,
                                                                                row_unscale, ceiling, top);
  else
    add_rms_norm_f16_kernel<256><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, y, w, xn, cols, eps, xh,
                                                                                  row_unscale, ceiling, top);
  CUDA_CHECK(cudaGetLastError());
}

void add_rms_norm_f32_cuda(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                           cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (cols < 1024) {
    add_rms_norm_f32_kernel<32><<<static_cast<unsigned>(rows), 32, 0, stream>>>(x, y, w, xn, cols, eps);
  } else {
    add_rms_norm_f32_kernel<256><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, y, w, xn, cols, eps);
  }
  CUDA_CHECK(cudaGetLastError());
}

void rms_norm_f32_cuda(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                       float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (cols < 1024) {
    rms_norm_f32_kernel<32><<<static_cast<unsigned>(rows), 32, 0, stream>>>(x, w, y, cols, eps);
  } else {
    rms_norm_f32_kernel<256><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, y, cols, eps);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
