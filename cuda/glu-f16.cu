// The fused middle of the CUDA prefill's FFN (issue 40 item 1: no f32 round trip between ops).
// Unfused, the intermediate [n][ff] — the widest tensor of a layer, 14,336 columns on an 8B
// model — is written by the gate/up GEMMs, read and written by their epilogue (where rows were
// scaled), read twice and written once by the GLU, then read again and written as f16 by the down
// GEMM's operand conversion. Here one block per row reads gate and up once, keeps the row's GLU
// values in registers while it finds their largest |a|, and writes the f16 operand and its row
// scale: a read of 2·ff products (f32, or halves: below) and a write of ff halves per row.
//
// The arithmetic is the unfused kernels', operation for operation: g = gate · unscale (the
// epilogue's product; a row of unscale 1 is untouched there, and g · 1 = g), act(g) · u with the
// functors of glu-activations.cuh, the largest finite |a| and f16_row_scale's power of two, and
// __float2half_rn(a · s). So, from f32 products, the down GEMM sees the same operand bit for bit
// (tests/test-cuda-ops.cpp checks the whole FFN against the unfused ops on the GPU under
// RAGKV_CUDA_FFN_PRODUCTS=f32).
//
// Products written in f16 (the default where the gate/up weight bounds them: f16-product-bound.h)
// are read as f16 and widened exactly, then go through the same arithmetic: half the bytes of the
// f32 products, written and read once each — on an 8B layer of 4,096 rows 0.47 GB less traffic.
#include <cfloat>

#include "cuda/block-reduce.cuh"
#include "cuda/cuda-check.h"
#include "cuda/f16-row-scale.cuh"
#include "cuda/glu-activations.cuh"
#include "cuda/glu-f16.cuh"

namespace ragkv {

namespace {

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__half v) { return __half2float(v); }

// kThreads threads per row, each holding up to kPer of its values (j = threadIdx.x + i·kThreads);
// Product: float or __half, the gate/up GEMMs' output type.
template <typename Act, int kThreads, int kPer, typename Product>
__global__ void __launch_bounds__(kThreads) glu_rows_to_f16_kernel(const Product* __restrict__ gate,
                                                                    const Product* __restrict__ up,
                                                                    const float* __restrict__ x_unscale, int64_t cols,
                                                                    __half* __restrict__ ah,
                                                                    float* __restrict__ a_unscale) {
  const int64_t row = blockIdx.x;
  const Product* gr = gate + row * cols;
  const Product* ur = up + row * cols;
  const float ux = x_unscale[row];
  const Act act;
  float a[kPer];
  float largest = 0.f;  // largest finite |a| of the row
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * kThreads;
    a[i] = 0.f;
    if (j < cols) {
      // __fmul_rn: rounded here as the epilogue rounds its stored product (a plain product could
      // be contracted into a neighbouring add, as GeluTanh's g + 0.044715·g³, and differ).
      const float g = __fmul_rn(widen(gr[j]), ux), u = __fmul_rn(widen(ur[j]), ux);
      a[i] = act(g) * u;
      const float m = fabsf(a[i]);
      if (m <= FLT_MAX) largest = fmaxf(largest, m);  // false for inf and NaN
    }
  }
  __shared__ float partial[kThreads / 32];
  largest = block_reduce<kThreads>(largest, partial, 0.f, MaxOp{});
  float scale, unscale;
  f16_row_scale(largest, scale, unscale);
  __half* hr = ah + row * cols;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int64_t j = threadIdx.x + int64_t(i) * kThreads;
    if (j < cols) hr[j] = __float2half_rn(a[i] * scale);
  }
  if (threadIdx.x == 0) a_unscale[row] = unscale;
}

template <typename Act, typename Product>
void glu_launch(const Product* gate, const Product* up, const float* x_unscale, int64_t rows, int64_t cols,
                __half* ah, float* a_unscale, cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(rows);
  if (cols <= 256 * 16)
    glu_rows_to_f16_kernel<Act, 256, 16><<<grid, 256, 0, stream>>>(gate, up, x_unscale, cols, ah, a_unscale);
  else if (cols <= 1024 * 16)
    glu_rows_to_f16_kernel<Act, 1024, 16><<<grid, 1024, 0, stream>>>(gate, up, x_unscale, cols, ah, a_unscale);
  else
    glu_rows_to_f16_kernel<Act, 1024, 32><<<grid, 1024, 0, stream>>>(gate, up, x_unscale, cols, ah, a_unscale);
}

template <typename Product>
void glu_rows(const Product* gate, const Product* up, const float* x_unscale, int64_t rows, int64_t cols, bool gelu,
              __half* ah, float* a_unscale, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (cols > kGluF16MaxCols) cuda_internal_fail("glu_rows_to_f16_cuda: a row wider than kGluF16MaxCols");
  if (gelu) glu_launch<GeluTanh>(gate, up, x_unscale, rows, cols, ah, a_unscale, stream);
  else glu_launch<Silu>(gate, up, x_unscale, rows, cols, ah, a_unscale, stream);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void glu_rows_to_f16_cuda(const float* gate, const float* up, const float* x_unscale, int64_t rows, int64_t cols,
                          bool gelu, __half* ah, float* a_unscale, cudaStream_t stream) {
  glu_rows(gate, up, x_unscale, rows, cols, gelu, ah, a_unscale, stream);
}

void glu_rows_to_f16_cuda(const __half* gate, const __half* up, const float* x_unscale, int64_t rows, int64_t cols,
                          bool gelu, __half* ah, float* a_unscale, cudaStream_t stream) {
  glu_rows(gate, up, x_unscale, rows, cols, gelu, ah, a_unscale, stream);
}

}  // namespace ragkv
