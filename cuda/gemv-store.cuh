// What the GEMV kernels share (quant-matmul.cu's f32 GEMV, int8-gemv.cu's integer one): the
// dispatch on the count of activation rows, and where lane 0 writes output row o — the part of
// GemvOutputs (quant-matmul.cuh) that holds row o, plus its bias.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/quant-matmul.cuh"

namespace ragkv {

// Calls f(std::integral_constant<int, N>{}) with N = n, 1 ≤ n ≤ kQuantGemvMaxRows (8): the GEMV
// kernels take their count of activation rows as a template argument (register accumulators).
template <typename F>
void with_row_count(int64_t n, F&& f) {
  static_assert(kQuantGemvMaxRows == 8, "one case per row count");
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

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
