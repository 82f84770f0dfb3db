// The row scaling of an f16 GEMM operand (convert.cuh, convert_rows_f32_to_f16_scaled_cuda, says
// why and when): from a row's largest finite |x|, the power of two s that brings it into
// [2^(top−1), 2^top) when it lies above `ceiling` or below 2^-10, else 1, and 1/s. The default
// (ceiling 65504, top 15) keeps an operand inside f16; a GEMM whose products are written in f16
// passes the ceiling 2^top of f16_product_top (f16-product-bound.h), so that no product can
// overflow. convert.cu's operand kernel and glu-f16.cu's fused FFN kernel share it, so a row is
// scaled alike by both. Plain C++ as well (tests/test-f16-products.cpp runs it on the host).
#pragma once
#include <cmath>

#if defined(__CUDACC__)
#define RAGKV_ROW_SCALE_HD __host__ __device__ __forceinline__
#else
#define RAGKV_ROW_SCALE_HD inline
#endif

namespace ragkv {

inline constexpr float kF16RowCeiling = 65504.f;  // the largest finite f16
inline constexpr int kF16RowTop = 15;              // scaled rows land in [2^14, 2^15)

RAGKV_ROW_SCALE_HD void f16_row_scale(float largest, float& scale, float& unscale, float ceiling = kF16RowCeiling,
                                      int top = kF16RowTop) {
  constexpr float kSmallRowMax = 1.f / 1024;  // rows whose largest |x| is below 2^-10 are scaled up
  scale = 1.f;
  unscale = 1.f;
  if (largest > ceiling || (largest > 0.f && largest < kSmallRowMax)) {
    int p = 0;
    (void)frexpf(largest, &p);  // 2^(p−1) ≤ largest < 2^p
    if (p < -100) p = -100;     // rows below 2^-101 keep scales inside the f32 range
    scale = ldexpf(1.f, top - p);  // largest · scale in [2^(top−1), 2^top)
    unscale = ldexpf(1.f, p - top);
  }
}

// The ceiling and top of an operand for a GEMM that writes its products in f16 when product_top ≥ 0
// (f16_product_top), else of a plain operand (65504, 15): convert.cu's and rms-norm.cu's f16
// operands alike.
RAGKV_ROW_SCALE_HD void f16_row_limits(int product_top, float& ceiling, int& top) {
  ceiling = product_top < 0 ? kF16RowCeiling : ldexpf(1.f, product_top);
  top = product_top < 0 ? kF16RowTop : product_top;
}

}  // namespace ragkv
