// Warp and block reductions shared by the row kernels (rms-norm, layer-norm, convert, rows):
// butterfly shuffles within a warp, then one shared-memory hop across the warps of a block.
#pragma once
#include <cuda_runtime.h>

namespace ragkv {

struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces v over the 32 lanes of a warp (all lanes active); every lane gets the result.
template <typename T, typename Op = SumOp>
__device__ __forceinline__ T warp_reduce(T v, Op op = {}) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduces v over a block of kBlock threads (whole warps); every thread gets the result.
// `partial` is shared memory of kBlock / 32 values; `identity` fills the lanes past the warps.
// The trailing __syncthreads lets a kernel reuse `partial` for its next reduction (a fast warp
// cannot overwrite it while a slow one still reads the previous result).
template <int kBlock, typename T, typename Op = SumOp>
__device__ __forceinline__ T block_reduce(T v, T* partial, T identity = T(0), Op op = {}) {
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block must be whole warps");
  v = warp_reduce(v, op);
  if constexpr (kBlock > 32) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    v = lane < kBlock / 32 ? partial[lane] : identity;
    v = warp_reduce(v, op);
    __syncthreads();
  }
  return v;
}

}  // namespace ragkv
