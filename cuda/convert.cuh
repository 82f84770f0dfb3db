// f32 <-> f16 conversion launchers and the operand / epilogue kernels of the f16 GEMM
// (convert.cu).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// dst[i] = src[i] rounded to the nearest f16, ties to even (|v| ≥ 65520 becomes ±inf, as
// fp32_to_fp16 on the host). n elements.
void convert_f32_to_f16_cuda(const float* src, __half* dst, int64_t n, cudaStream_t stream);
// dst[i] = src[i] widened to f32 (exact). n elements.
void convert_f16_to_f32_cuda(const __half* src, float* dst, int64_t n, cudaStream_t stream);

// The activation operand of an f16 GEMM, for a row-major f32 x [rows][cols]:
//   xh[r][j] = f16(x[r][j] · s_r),   row_unscale[r] = 1 / s_r,
// where s_r = 1 unless the largest finite |x| of row r lies outside [2^-10, 65504]: such a row is
// scaled by the power of two that brings its largest value into [2^14, 2^15), so nothing
// overflows to inf and a row of tiny values keeps f16's full relative precision. Powers of two
// scale exactly: only entries more than 2^28 times smaller than the row's largest, negligible
// beside it, fall into f16's subnormal range. An all-zero or all-non-finite row keeps s_r = 1.
// rows ≤ 2^31 − 1 (one block per row). xh [rows][cols], row_unscale [rows], both device memory.
// product_top ≥ 0 (f16_product_top, f16-product-bound.h: for a GEMM that writes its products in
// f16): the ceiling is 2^product_top instead of 65504 and scaled rows land in
// [2^(product_top−1), 2^product_top), so that every row's largest |xh| ≤ 2^product_top.
void convert_rows_f32_to_f16_scaled_cuda(const float* x, __half* xh, float* row_unscale,
                                         int64_t rows, int64_t cols, cudaStream_t stream, int product_top = -1);

// The GEMM epilogue over a row-major f32 y [rows][cols]:
//   y[r][j] = y[r][j] · row_unscale[r] + bias[j]
// row_unscale (from convert_rows_f32_to_f16_scaled_cuda) and bias [cols] may each be null
// (meaning 1 and 0). A row with unscale 1 and no bias is not touched. rows ≤ 2^31 − 1.
void matmul_epilogue_f32_cuda(float* y, const float* row_unscale, const float* bias, int64_t rows,
                              int64_t cols, cudaStream_t stream);

}  // namespace ragkv
