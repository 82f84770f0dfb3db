// The row scaling of an f16 GEMM operand (convert.cuh, convert_rows_f32_to_f16_scaled_cuda, says
// why and when): from a row's largest finite |x|, the power of two s that brings it into
// [2^14, 2^15) when it lies outside [2^-10, 65504], else 1, and 1/s. convert.cu's operand kernel and
// glu-f16.cu's fused FFN kernel share it, so a row is scaled alike by both.
#pragma once
#include <cuda_runtime.h>

namespace ragkv {

__device__ __forceinline__ void f16_row_scale(float largest, float& scale, float& unscale) {
  constexpr float kF16Max = 65504.f;
  constexpr float kSmallRowMax = 1.f / 1024;  // rows whose largest |x| is below 2^-10 are scaled up
  scale = 1.f;
  unscale = 1.f;
  if (largest > kF16Max || (largest > 0.f && largest < kSmallRowMax)) {
    int p = 0;
    frexpf(largest, &p);  // 2^(p−1) ≤ largest < 2^p
    p = max(p, -100);     // rows below 2^-101 keep scales inside the f32 range
    scale = ldexpf(1.f, 15 - p);  // largest · scale in [2^14, 2^15)
    unscale = ldexpf(1.f, p - 15);
  }
}

}  // namespace ragkv
