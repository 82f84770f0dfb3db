// LayerNorm (Ba et al. 2016) as BERT uses it: biased variance, affine weight and bias. One thread
// block per row, laid out as rms-norm.cu: rows shorter than 1024 (BERT-small's 384, MiniLM's 384)
// take one warp, longer rows 256 threads; sums go through warp shuffles plus one shared-memory hop.
//
// Two passes over the row, like the CPU reference: the mean first, then Σ (x − mean)², so a row
// with a large mean and a small spread loses nothing to cancellation. Both sums are accumulated in
// double, as core/backend/cpu-backend.cpp does (LayerNorm is a small share of an encoder layer; FP64 adds
// are cheap at this size), so mean and variance agree with the CPU to a few double ulp and the
// f32 results differ by at most a couple of f32 ulp. Then, in the CPU's order:
//   inv = float(1 / sqrt(var / n + eps)) (in double), m = float(mean),
//   y = (x − m) · inv · w + b   (f32).
//
// In-place use (x == y) is safe: a thread writes only its own elements, after both block-wide
// sums are complete (each reduction ends with a __syncthreads, or is warp-only). Hence no
// __restrict__ on x and y.
#include "cuda/block-reduce.cuh"
#include "cuda/cuda-check.h"
#include "cuda/layer-norm.cuh"

namespace ragkv {

namespace {

template <int kBlock>
__global__ void layer_norm_f32_kernel(const float* x, const float* __restrict__ w,
                                      const float* __restrict__ b, float* y, int64_t cols, float eps) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block must be whole warps");
  __shared__ double partial[kBlock / 32];
  const int64_t row = blockIdx.x;
  const float* xr = x + row * cols;
  float* yr = y + row * cols;

  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) sum += xr[j];
  const double mean = block_reduce<kBlock>(sum, partial) / static_cast<double>(cols);

  double ss = 0.0;
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
    const double d = xr[j] - mean;
    ss += d * d;
  }
  const double var = block_reduce<kBlock>(ss, partial) / static_cast<double>(cols);

  const float inv = static_cast<float>(1.0 / sqrt(var + eps));
  const float m = static_cast<float>(mean);
  for (int64_t j = threadIdx.x; j < cols; j += kBlock) yr[j] = (xr[j] - m) * inv * w[j] + b[j];
}

}  // namespace

void layer_norm_f32_cuda(const float* x, const float* w, const float* b, float* y, int64_t rows,
                         int64_t cols, float eps, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  if (cols < 1024) {
    layer_norm_f32_kernel<32><<<static_cast<unsigned>(rows), 32, 0, stream>>>(x, w, b, y, cols, eps);
  } else {
    layer_norm_f32_kernel<256><<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, w, b, y, cols, eps);
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
