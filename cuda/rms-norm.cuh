// RMSNorm launchers (rms-norm.cu).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quant-dot.cuh"

namespace ragkv {

// y[r][j] = x[r][j] / sqrt(mean_j(x[r][j]²) + eps) · w[j] for every row r of a row-major
// [rows][cols] f32 tensor. x and y may alias. Throws ragkv::Error when the launch fails.
void rms_norm_f32_cuda(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                       float eps, cudaStream_t stream);

// x += y, then xn = rms_norm(x) · w, in one pass over each row; bit for bit add_f32_cuda then
// rms_norm_f32_cuda. y overlaps neither x nor xn; xn may alias x.
void add_rms_norm_f32_cuda(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                           cudaStream_t stream);

// The same x and xn, and xn's 8-bit activation blocks of `block` values (32 or 256, dividing cols)
// into q8 (int8-gemv.cuh's act_q8_outputs for rows × cols): what quantize_act_q8_cuda then makes
// of xn, bit for bit, in the same pass.
void add_rms_norm_q8_cuda(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                          int block, const quant_dot::ActQ8Out& q8, cudaStream_t stream);

// The same x and xn, and xn as the f16 operand of the GEMM that reads it next: xh [rows][cols] and
// row_unscale [rows], what convert_rows_f32_to_f16_scaled_cuda(xn, …, product_top) makes of xn,
// bit for bit, in the same pass.
void add_rms_norm_f16_cuda(float* x, const float* y, const float* w, float* xn, int64_t rows, int64_t cols, float eps,
                           __half* xh, float* row_unscale, int product_top, cudaStream_t stream);

}  // namespace ragkv
