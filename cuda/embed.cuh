// Token embedding lookup launchers (embed.cu).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// out[i][j] = table[ids[i]][j] · scale for i < n, j < dim, in f32. table: device [vocab][dim]
// (f16 for matrix weights, f32 for a one-row table); ids: device int32 [n], each in [0, vocab)
// (the caller checks them on the host: the kernel does not); out: device f32 [n][dim].
// n ≤ 2^31 − 1. Throws ragkv::Error when the launch fails.
void embed_f16_cuda(const __half* table, const int32_t* ids, float* out, int64_t n, int64_t dim,
                    float scale, cudaStream_t stream);
void embed_f32_cuda(const float* table, const int32_t* ids, float* out, int64_t n, int64_t dim,
                    float scale, cudaStream_t stream);

}  // namespace ragkv
