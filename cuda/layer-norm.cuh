// LayerNorm launcher (layer-norm.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// y[r][j] = (x[r][j] − mean_r) / sqrt(var_r + eps) · w[j] + b[j] for every row r of a row-major
// [rows][cols] f32 tensor, var_r the biased (population) variance of the row. x and y may alias.
// rows ≤ 2^31 − 1. Throws ragkv::Error when the launch fails.
void layer_norm_f32_cuda(const float* x, const float* w, const float* b, float* y, int64_t rows,
                         int64_t cols, float eps, cudaStream_t stream);

}  // namespace ragkv
