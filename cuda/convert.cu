// f32 <-> f16 conversions, and the two small kernels around the f16 GEMM of matmul.
//
// Plain conversions are memory-bound grid-stride loops (as elementwise.cu): one element per
// thread per step, grid capped so huge tensors reuse threads. f32 → f16 is __float2half_rn,
// round to nearest even with gradual underflow and overflow to inf: bit for bit what the host's
// fp32_to_fp16 (core/format/fp16.h) produces, so weights converted here equal weights converted there.
//
// GEMM operand (convert_rows_f32_to_f16_scaled_cuda): one thread block per row. The block first
// finds the row's largest finite |x| (warp shuffles, one shared-memory hop across warps), then
// converts the row. Activations of these models are normally O(1), so a row keeps s = 1 and the
// conversion is the plain rounding (relative error ≤ 2^-11, as in the weights). Two kinds of row
// would lose more, and are scaled by a power of two (exact) into [2^14, 2^15) instead, the
// epilogue multiplying the row of y back by 1/s (exact too):
//   * largest |x| > 65504: the row would overflow to inf and turn y into inf/NaN;
//   * largest |x| < 2^-10: its typical entries would fall into f16's subnormal range (< 2^-14),
//     where the rounding error is an absolute 2^-25, i.e. relative errors of 1e-3 and worse.
// Non-finite inputs convert as they are (inf stays inf, NaN stays NaN), as in the CPU GEMM.
// For a GEMM whose products are written in f16 the ceiling is lower (2^top of f16_product_top,
// f16-product-bound.h) and scaled rows land in [2^(top−1), 2^top).
//
// Epilogue (matmul_epilogue_f32_cuda): blocks over (row, column chunk); a row whose unscale is 1
// with no bias returns at once, so a matmul without bias and without scaled rows costs one
// near-empty launch. y · 1/s + b is one f32 multiply and one add, as the CPU adds its bias.
#include <algorithm>
#include <cfloat>

#include "cuda/block-reduce.cuh"
#include "cuda/convert.cuh"
#include "cuda/cuda-check.h"
#include "cuda/f16-row-scale.cuh"

namespace ragkv {

namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 65535;
constexpr int64_t kEpilogueChunk = 1024;  // columns per epilogue block

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks));
}

__global__ void f32_to_f16_kernel(const float* __restrict__ src, __half* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = __float2half_rn(src[i]);
}

__global__ void f16_to_f32_kernel(const __half* __restrict__ src, float* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = __half2float(src[i]);
}

template <int kThreads>
__global__ void rows_f32_to_f16_scaled_kernel(const float* __restrict__ x, __half* __restrict__ xh,
                                              float* __restrict__ row_unscale, int64_t cols, float ceiling,
                                              int top) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  __half* hr = xh + row * cols;

  float largest = 0.f;  // largest finite |x| of the row
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) {
    const float a = fabsf(xr[j]);
    if (a <= FLT_MAX) largest = fmaxf(largest, a);  // false for inf and NaN
  }
  __shared__ float partial[kThreads / 32];
  largest = block_reduce<kThreads>(largest, partial, 0.f, MaxOp{});

  float scale, unscale;
  f16_row_scale(largest, scale, unscale, ceiling, top);
  for (int64_t j = threadIdx.x; j < cols; j += kThreads) hr[j] = __float2half_rn(xr[j] * scale);
  if (threadIdx.x == 0) row_unscale[row] = unscale;
}

__global__ void matmul_epilogue_kernel(float* __restrict__ y, const float* __restrict__ row_unscale,
                                       const float* __restrict__ bias, int64_t cols) {
  const int64_t row = blockIdx.x;
  const float unscale = row_unscale ? row_unscale[row] : 1.f;
  if (unscale == 1.f && bias == nullptr) return;  // uniform over the block
  float* yr = y + row * cols;
  const int64_t n_chunks = (cols + kEpilogueChunk - 1) / kEpilogueChunk;
  for (int64_t chunk = blockIdx.y; chunk < n_chunks; chunk += gridDim.y) {
    const int64_t end = (chunk + 1) * kEpilogueChunk < cols ? (chunk + 1) * kEpilogueChunk : cols;
    for (int64_t j = chunk * kEpilogueChunk + threadIdx.x; j < end; j += blockDim.x)
      yr[j] = bias ? yr[j] * unscale + bias[j] : yr[j] * unscale;
  }
}

}  // namespace

void convert_f32_to_f16_cuda(const float* src, __half* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  f32_to_f16_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  CUDA_CHECK(cudaGetLastError());
}

void convert_f16_to_f32_cuda(const __half* src, float* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  f16_to_f32_kernel<<<grid_for(n), kBlock, 0, stream>>>(src, dst, n);
  CUDA_CHECK(cudaGetLastError());
}

void convert_rows_f32_to_f16_scaled_cuda(const float* x, __half* xh, float* row_unscale,
                                         int64_t rows, int64_t cols, cudaStream_t stream, int product_top) {
  if (rows == 0) return;
  if (product_top > kF16RowTop) cuda_internal_fail("convert_rows_f32_to_f16_scaled_cuda: product_top above 15");
  float ceiling;
  int top;
  f16_row_limits(product_top, ceiling, top);
  const auto grid = static_cast<unsigned>(rows);
  // Short rows (the hidden sizes of the small models) take one warp, as rms-norm.cu does.
  if (cols < 1024)
    rows_f32_to_f16_scaled_kernel<32><<<grid, 32, 0, stream>>>(x, xh, row_unscale, cols, ceiling, top);
  else rows_f32_to_f16_scaled_kernel<256><<<grid, 256, 0, stream>>>(x, xh, row_unscale, cols, ceiling, top);
  CUDA_CHECK(cudaGetLastError());
}

void matmul_epilogue_f32_cuda(float* y, const float* row_unscale, const float* bias, int64_t rows,
                              int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || (row_unscale == nullptr && bias == nullptr)) return;
  const int64_t n_chunks = (cols + kEpilogueChunk - 1) / kEpilogueChunk;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>(std::min<int64_t>(n_chunks, kMaxBlocks)));
  matmul_epilogue_kernel<<<grid, kBlock, 0, stream>>>(y, row_unscale, bias, cols);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
