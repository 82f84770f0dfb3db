// ggml tensor types: names, block geometry and dequantisation of each supported type to f32.
// Block layouts follow the GGUF specification (ggml's block_q4_0, block_q4_K, ...).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/format/fp16.h"

namespace ragkv {

// Numbering as in the GGUF specification.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

// Name as ggml prints it ("Q4_K"), or "type<N>" for a number ggml does not define.
const char* ggml_type_name(GgmlType t);
// True when dequantize_row() handles this type.
bool ggml_type_supported(GgmlType t);
// Elements per block (1 for plain float types) and bytes per block. Throw for unknown types.
int64_t ggml_block_elems(GgmlType t);
size_t ggml_block_bytes(GgmlType t);
// Bytes of a row of n elements (n must be a multiple of the block size; throws otherwise).
size_t ggml_row_bytes(GgmlType t, int64_t n);

// A block's little-endian fields where they lie (unaligned): an f16 scale or min, 32 bits of
// high bits. For the dequantisers here and the CPU backend's portable kernels.
inline float block_f16_at(const uint8_t* p) {
  f16_t h;
  std::memcpy(&h, p, sizeof h);
  return fp16_to_fp32(h);
}
inline uint32_t block_u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block, from its 12 bytes
// (constexpr: the CUDA kernels call it too, cuda/quant-decode.cuh):
//   bytes 0-3:  low 6 bits = scale 0-3, top 2 bits = high bits of scale 4-7
//   bytes 4-7:  low 6 bits = min 0-3,   top 2 bits = high bits of min 4-7
//   bytes 8-11: low nibble = low 4 bits of scale 4-7, high nibble = low 4 bits of min 4-7
constexpr void k4_scale_min(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Dequantise n elements (a multiple of the block size) starting at src into dst.
// Throws ragkv::Error naming the type when it is not supported.
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);

}  // namespace ragkv
