// Where a GEMV kernel's lane 0 writes output row o (quant-matmul.cu's f32 GEMV, int8-gemv.cu's
// integer one): the part of GemvOutputs (quant-matmul.cuh) that holds row o, plus its bias.
#pragma once
#include <cuda_runtime.h>

#include "cuda/quant-matmul.cuh"

namespace ragkv {

// y_p[r · ld_p + (o − first[p])] = acc[r] (+ bias_p[o − first[p]]) for r < N.
template <int N>
__device__ __forceinline__ void store_gemv_row(const GemvOutputs& out, int64_t o, const float* acc) {
  // The output holding row o, picked with constant indices (a dynamic index into the parameter
  // struct would copy it to local memory).
  float* y = out.y[0];
  const float* bias = out.bias[0];
  int64_t ld = out.ld[0], c = o;
#pragma unroll
  for (int p = 1; p < GemvOutputs::kMaxParts; ++p)
    if (p < out.parts && o >= out.first[p]) {
      y = out.y[p];
      bias = out.bias[p];
      ld = out.ld[p];
      c = o - out.first[p];
    }
  const float b = bias ? bias[c] : 0.f;
#pragma unroll
  for (int r = 0; r < N; ++r) y[r * ld + c] = bias ? acc[r] + b : acc[r];
}

}  // namespace ragkv
