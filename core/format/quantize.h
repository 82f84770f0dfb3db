// Quantisation of f32 rows into the GGUF block types that core/format/quant.h dequantises (the inverse
// of dequantize_row), for writing test models and fixtures. Each block takes the plainest rule its
// layout allows — round to nearest with one scale (and min) per block, the K-quants' sub-block
// scales and mins rounded to their 6- or 8-bit codes — not llama.cpp's quantisers, which search
// scales that minimise a weighted error: good enough for random weights, worse than llama.cpp's on
// real ones. Error bounds per type are stated (and tested) in tests/test-quantize.cpp.
#pragma once
#include <cstdint>

#include "core/format/quant.h"

namespace ragkv {

// True for the types quantize_row writes: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
// Q5_K, Q6_K.
bool ggml_type_quantizable(GgmlType t);

// Encode n f32 values (a multiple of the type's block size) as ggml_row_bytes(t, n) bytes at dst.
// Throws ragkv::Error naming the type when it is not quantizable or n is not whole blocks.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);

}  // namespace ragkv
