// Row gather / scatter and row distance launchers (rows.cu), for the selective-recompute fusor:
// gathering active rows, scattering recomputed K/V into the f16 KV buffer, and the KV deviation
// of CacheBlend §4.1.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// dst row dst_rows[k] = src row src_rows[k] for k < n, rows of `cols` elements; a null index
// array means the identity (row k). f32 → f16 rounds to nearest even. Index arrays are device
// int32 [n], checked by the caller to lie inside src and dst; no two k may name the same dst row
// (the caller resolves duplicates), and src and dst must not overlap. n ≤ 2^31 − 1.
void copy_rows_f32_cuda(const float* src, const int32_t* src_rows, float* dst, const int32_t* dst_rows,
                        int64_t n, int64_t cols, cudaStream_t stream);
void copy_rows_f32_to_f16_cuda(const float* src, const int32_t* src_rows, __half* dst,
                               const int32_t* dst_rows, int64_t n, int64_t cols, cudaStream_t stream);
// Both copies src0 → dst0 and src1 → dst1 through the same index lists, in one launch (a layer's
// K and V rows); the four buffers must not overlap.
void copy_rows_pair_f32_cuda(const float* src0, const float* src1, const int32_t* src_rows, float* dst0, float* dst1,
                             const int32_t* dst_rows, int64_t n, int64_t cols, cudaStream_t stream);
void copy_rows_pair_f32_to_f16_cuda(const float* src0, const float* src1, const int32_t* src_rows, __half* dst0,
                                    __half* dst1, const int32_t* dst_rows, int64_t n, int64_t cols,
                                    cudaStream_t stream);

// out[i] = Σ_c (a[i][c] − b[rows[i]][c])² for i < n: a f32 [n][cols], b f32 or f16 [≥ rows][cols],
// rows device int32 [n] (checked by the caller), out f32 [n]. n ≤ 2^31 − 1.
void row_sq_dist_f32_cuda(const float* a, const float* b, const int32_t* rows, float* out, int64_t n,
                          int64_t cols, cudaStream_t stream);
void row_sq_dist_f16_cuda(const float* a, const __half* b, const int32_t* rows, float* out, int64_t n,
                          int64_t cols, cudaStream_t stream);

}  // namespace ragkv
