// The middle of the CUDA prefill's fused FFN (CudaBackend::glu_ffn_impl): the gate and up GEMMs'
// raw products (f32, or f16 where the weight bounds them) in, the down GEMM's f16 operand out, in
// one pass (glu-f16.cu).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// The widest intermediate glu_rows_to_f16_cuda takes (a row's values stay in registers).
constexpr int64_t kGluF16MaxCols = 32768;

// For rows r < rows and j < cols (≤ kGluF16MaxCols), with g = gate[r][j] · x_unscale[r] and
// u = up[r][j] · x_unscale[r] (the GEMM epilogue of matmul: the products of row-scaled operands),
//   a[r][j] = act(g) · u        (act = silu, or gelu_tanh when gelu: elementwise.cu's glu)
// written as the next GEMM's operand: ah[r][j] = f16(a · s_r), a_unscale[r] = 1 / s_r, with s_r
// from the row's largest finite |a| as convert_rows_f32_to_f16_scaled_cuda picks it. Exactly what
// matmul's epilogue, swiglu / geglu and that conversion give one after the other, in one read of
// gate and up and one write of the f16 row. All pointers device memory; rows ≤ 2^31 − 1.
void glu_rows_to_f16_cuda(const float* gate, const float* up, const float* x_unscale, int64_t rows, int64_t cols,
                          bool gelu, __half* ah, float* a_unscale, cudaStream_t stream);
// The same from products the GEMMs wrote in f16 (their rows packed, [rows][cols] halves), each
// widened exactly first.
void glu_rows_to_f16_cuda(const __half* gate, const __half* up, const float* x_unscale, int64_t rows, int64_t cols,
                          bool gelu, __half* ah, float* a_unscale, cudaStream_t stream);

}  // namespace ragkv
