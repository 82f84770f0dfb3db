// Launchers of the decode GEMV on 8-bit activation blocks (int8-gemv.cu): a decode step's x
// quantised per block on the device as the CPU backend's block8 products quantise it, then each
// quantised weight row against it in integer dot products (quant-dot.cuh). All pointers are
// device memory; a weight is `rows` rows of `cols` values of type t, as quant-matmul.cuh says.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/format/quant.h"
#include "cuda/quant-dot.cuh"
#include "cuda/quant-matmul.cuh"

namespace ragkv {

// Work memory for the activation blocks of n rows of cols values in blocks of `block` values
// (quant_dot::act_block of the weight's type; cols a multiple of it).
size_t act_q8_bytes(int block, int64_t n, int64_t cols);

// x [n][cols] f32 → activation blocks in `work` (act_q8_bytes of it, 256-byte aligned): q, d and
// dsum (block 32) or bsum (block 256), exactly the CPU's quantize_act32 / quantize_act256 values.
quant_dot::ActQ8 quantize_act_q8_cuda(const float* x, int64_t n, int64_t cols, int block, void* work,
                                      cudaStream_t stream);

// out rows (GemvOutputs) = a [n][cols] · Wᵀ for a weight of type t (quant_dot::with_lane), n ≤
// kQuantGemvMaxRows, a quantised in quant_dot::act_block(t) blocks: each output the CPU's block8
// product up to the order its f32 block terms are added.
void int8_gemv_cuda(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, const quant_dot::ActQ8& a, int64_t n,
                    const GemvOutputs& out, cudaStream_t stream);

}  // namespace ragkv
