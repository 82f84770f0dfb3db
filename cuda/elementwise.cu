// Element-wise f32 kernels: SwiGLU / GeGLU gating and the residual add.
//
// Memory-bound one-pass kernels: a grid-stride loop, one element per thread per step, with the
// grid capped so huge tensors reuse threads instead of overflowing the grid. Each element is
// read and written by one thread only, so outputs may alias inputs (hence no __restrict__).
// The activations are written as the CPU backend writes them (same operation order, accurate
// expf and tanhf, no fast-math), so results agree to a few ulp. Vectorised float4 access is the
// obvious next step if profiles show these kernels; they are a small share of a layer.
#include <algorithm>

#include "cuda/cuda-check.h"
#include "cuda/elementwise.cuh"

namespace ragkv {

namespace {

constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 65535;

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kBlock - 1) / kBlock, kMaxBlocks));
}

struct Silu {
  __device__ __forceinline__ float operator()(float g) const { return g / (1.f + expf(-g)); }
};

struct GeluTanh {
  __device__ __forceinline__ float operator()(float g) const {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
  }
};

template <typename Act>
__global__ void glu_f32_kernel(const float* gate, const float* up, float* out, int64_t n, Act act) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = act(gate[i]) * up[i];
}

__global__ void add_f32_kernel(float* a, const float* b, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    a[i] += b[i];
}

template <typename Act>
void glu_launch(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  glu_f32_kernel<<<grid_for(n), kBlock, 0, stream>>>(gate, up, out, n, Act{});
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void swiglu_f32_cuda(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  glu_launch<Silu>(gate, up, out, n, stream);
}

void geglu_f32_cuda(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream) {
  glu_launch<GeluTanh>(gate, up, out, n, stream);
}

void add_f32_cuda(float* a, const float* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_f32_kernel<<<grid_for(n), kBlock, 0, stream>>>(a, b, n);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
