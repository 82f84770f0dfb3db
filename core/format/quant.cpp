// ggml tensor types: names, block geometry, and scalar dequantisation of GGUF blocks to f32.
// The block layouts and formulas follow the GGUF specification and ggml's reference
// dequantize_row_* functions (checked against gguf-py by tests/test-quant.cpp).
// Blocks are read byte-wise: a block's f16/u32 fields may be unaligned, so they are memcpy'd.
// A scale-and-offset value (Q4_1, Q5_1, Q4_K, Q5_K) is one fused multiply-add, written out so the
// result does not depend on whether the compiler contracts: the AVX2 dequantisers
// (core/backend/quant-kernels-avx2.cpp) compute the same bits.
#include "core/format/quant.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/util/error.h"
#include "core/format/fp16.h"

namespace ragkv {

namespace {

constexpr int64_t QK = 32;     // elements per block of the legacy types (Q4_0 ... Q8_0)
constexpr int64_t QK_K = 256;  // elements per super-block of the K-quants
constexpr int K_SCALE_SIZE = 12;

// Byte sizes of one block of each supported quantised type.
constexpr size_t Q4_0_BYTES = 2 + QK / 2;                        // d, qs[16]
constexpr size_t Q4_1_BYTES = 2 + 2 + QK / 2;                    // d, m, qs[16]
constexpr size_t Q5_0_BYTES = 2 + 4 + QK / 2;                    // d, qh[4], qs[16]
constexpr size_t Q5_1_BYTES = 2 + 2 + 4 + QK / 2;                // d, m, qh[4], qs[16]
constexpr size_t Q8_0_BYTES = 2 + QK;                            // d, qs[32]
constexpr size_t Q4_K_BYTES = 2 + 2 + K_SCALE_SIZE + QK_K / 2;   // d, dmin, scales, qs
constexpr size_t Q5_K_BYTES = 2 + 2 + K_SCALE_SIZE + QK_K / 8 + QK_K / 2;  // ... qh[32], qs
constexpr size_t Q6_K_BYTES = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;         // ql, qh, scales, d

static_assert(Q4_0_BYTES == 18 && Q4_1_BYTES == 20 && Q5_0_BYTES == 22 && Q5_1_BYTES == 24);
static_assert(Q8_0_BYTES == 34 && Q4_K_BYTES == 144 && Q5_K_BYTES == 176 && Q6_K_BYTES == 210);

struct TypeInfo {
  GgmlType type;
  const char* name;
  int64_t block_elems;
  size_t block_bytes;
  bool supported;
};

// Every type the header names, with ggml's block geometry.
constexpr TypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, true},
    {GgmlType::F16, "F16", 1, 2, true},
    {GgmlType::Q4_0, "Q4_0", QK, Q4_0_BYTES, true},
    {GgmlType::Q4_1, "Q4_1", QK, Q4_1_BYTES, true},
    {GgmlType::Q5_0, "Q5_0", QK, Q5_0_BYTES, true},
    {GgmlType::Q5_1, "Q5_1", QK, Q5_1_BYTES, true},
    {GgmlType::Q8_0, "Q8_0", QK, Q8_0_BYTES, true},
    {GgmlType::Q8_1, "Q8_1", QK, 36, false},  // f16 d, f16 s, i8 qs[32]
    {GgmlType::Q2_K, "Q2_K", QK_K, 84, false},
    {GgmlType::Q3_K, "Q3_K", QK_K, 110, false},
    {GgmlType::Q4_K, "Q4_K", QK_K, Q4_K_BYTES, true},
    {GgmlType::Q5_K, "Q5_K", QK_K, Q5_K_BYTES, true},
    {GgmlType::Q6_K, "Q6_K", QK_K, Q6_K_BYTES, true},
    {GgmlType::Q8_K, "Q8_K", QK_K, 292, false},
    {GgmlType::IQ2_XXS, "IQ2_XXS", QK_K, 66, false},
    {GgmlType::IQ2_XS, "IQ2_XS", QK_K, 74, false},
    {GgmlType::IQ3_XXS, "IQ3_XXS", QK_K, 98, false},
    {GgmlType::IQ1_S, "IQ1_S", QK_K, 50, false},
    {GgmlType::IQ4_NL, "IQ4_NL", QK, 18, false},
    {GgmlType::IQ3_S, "IQ3_S", QK_K, 110, false},
    {GgmlType::IQ2_S, "IQ2_S", QK_K, 82, false},
    {GgmlType::IQ4_XS, "IQ4_XS", QK_K, 136, false},
    {GgmlType::I8, "I8", 1, 1, false},
    {GgmlType::I16, "I16", 1, 2, false},
    {GgmlType::I32, "I32", 1, 4, false},
    {GgmlType::I64, "I64", 1, 8, false},
    {GgmlType::F64, "F64", 1, 8, false},
    {GgmlType::IQ1_M, "IQ1_M", QK_K, 56, false},
    {GgmlType::BF16, "BF16", 1, 2, true},
    {GgmlType::TQ1_0, "TQ1_0", QK_K, 54, false},
    {GgmlType::TQ2_0, "TQ2_0", QK_K, 66, false},
    {GgmlType::MXFP4, "MXFP4", QK, 17, false},
};

constexpr const char* kSupportedList = "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K";

const TypeInfo* find_type(GgmlType t) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == t) return &info;
  }
  return nullptr;
}

const TypeInfo& require_type(GgmlType t) {
  const TypeInfo* info = find_type(t);
  if (info == nullptr) fail("unknown tensor type {} (not a ggml type number)", static_cast<uint32_t>(t));
  return *info;
}

// ---- legacy 32-element blocks ------------------------------------------------------------
// In Q4/Q5 blocks, byte j of qs holds element j in its low nibble and element j+16 in its
// high nibble; bit j of the 32-bit qh holds the fifth bit of element j.

void dequant_q4_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q4_0_BYTES, y += QK) {
    const float d = block_f16_at(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < QK / 2; ++j) {
      const int x0 = (qs[j] & 0x0f) - 8;
      const int x1 = (qs[j] >> 4) - 8;
      y[j] = x0 * d;
      y[j + QK / 2] = x1 * d;
    }
  }
}

void dequant_q4_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q4_1_BYTES, y += QK) {
    const float d = block_f16_at(b);
    const float m = block_f16_at(b + 2);
    const uint8_t* qs = b + 4;
    for (int j = 0; j < QK / 2; ++j) {
      const int x0 = qs[j] & 0x0f;
      const int x1 = qs[j] >> 4;
      y[j] = std::fma(float(x0), d, m);
      y[j + QK / 2] = std::fma(float(x1), d, m);
    }
  }
}

void dequant_q5_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q5_0_BYTES, y += QK) {
    const float d = block_f16_at(b);
    const uint32_t qh = block_u32_at(b + 2);
    const uint8_t* qs = b + 6;
    for (int j = 0; j < QK / 2; ++j) {
      const int h0 = (qh >> j) & 1;
      const int h1 = (qh >> (j + QK / 2)) & 1;
      const int x0 = ((qs[j] & 0x0f) | (h0 << 4)) - 16;
      const int x1 = ((qs[j] >> 4) | (h1 << 4)) - 16;
      y[j] = x0 * d;
      y[j + QK / 2] = x1 * d;
    }
  }
}

void dequant_q5_1(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q5_1_BYTES, y += QK) {
    const float d = block_f16_at(b);
    const float m = block_f16_at(b + 2);
    const uint32_t qh = block_u32_at(b + 4);
    const uint8_t* qs = b + 8;
    for (int j = 0; j < QK / 2; ++j) {
      const int h0 = (qh >> j) & 1;
      const int h1 = (qh >> (j + QK / 2)) & 1;
      const int x0 = (qs[j] & 0x0f) | (h0 << 4);
      const int x1 = (qs[j] >> 4) | (h1 << 4);
      y[j] = std::fma(float(x0), d, m);
      y[j + QK / 2] = std::fma(float(x1), d, m);
    }
  }
}

void dequant_q8_0(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q8_0_BYTES, y += QK) {
    const float d = block_f16_at(b);
    const uint8_t* qs = b + 2;
    for (int j = 0; j < QK; ++j) y[j] = static_cast<int8_t>(qs[j]) * d;
  }
}

// ---- K-quants (256-element super-blocks) -------------------------------------------------

// Each 64-element chunk uses 32 bytes of qs: the low nibbles are the first 32 elements (sub-block
// 2c), the high nibbles the next 32 (sub-block 2c+1). y = d*scale*q - dmin*min.
void dequant_q4_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q4_K_BYTES) {
    const float d = block_f16_at(b);
    const float dmin = block_f16_at(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* q = b + 4 + K_SCALE_SIZE;
    for (int is = 0; is < 8; is += 2, q += 32) {
      int sc, m;
      k4_scale_min(is, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k4_scale_min(is + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = std::fma(d1, float(q[l] & 0x0f), -m1);
      for (int l = 0; l < 32; ++l) *y++ = std::fma(d2, float(q[l] >> 4), -m2);
    }
  }
}

// As Q4_K, plus a fifth bit per element from qh[32]: element l of sub-block s takes bit s of qh[l].
void dequant_q5_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q5_K_BYTES) {
    const float d = block_f16_at(b);
    const float dmin = block_f16_at(b + 2);
    const uint8_t* scales = b + 4;
    const uint8_t* qh = b + 4 + K_SCALE_SIZE;
    const uint8_t* ql = qh + QK_K / 8;
    for (int is = 0; is < 8; is += 2, ql += 32) {
      int sc, m;
      k4_scale_min(is, scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      k4_scale_min(is + 1, scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        const int q = (ql[l] & 0x0f) | (((qh[l] >> is) & 1) << 4);
        *y++ = std::fma(d1, float(q), -m1);
      }
      for (int l = 0; l < 32; ++l) {
        const int q = (ql[l] >> 4) | (((qh[l] >> (is + 1)) & 1) << 4);
        *y++ = std::fma(d2, float(q), -m2);
      }
    }
  }
}

// Each 128-element half uses 64 bytes of ql and 32 of qh. For l in [0, 32):
//   element l      = low nibble of ql[l]     | bits 0-1 of qh[l] << 4
//   element l + 32 = low nibble of ql[l+32]  | bits 2-3 of qh[l] << 4
//   element l + 64 = high nibble of ql[l]    | bits 4-5 of qh[l] << 4
//   element l + 96 = high nibble of ql[l+32] | bits 6-7 of qh[l] << 4
// minus 32, times d * scales[e / 16] (16 signed 8-bit scales per super-block).
void dequant_q6_k(const uint8_t* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, b += Q6_K_BYTES) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + QK_K / 2;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + QK_K / 2 + QK_K / 4);
    const float d = block_f16_at(b + QK_K / 2 + QK_K / 4 + QK_K / 16);
    for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

// ---- plain float types ---------------------------------------------------------------------

void convert_f16(const uint8_t* src, float* dst, int64_t n) {
  if (reinterpret_cast<uintptr_t>(src) % alignof(f16_t) == 0) {
    fp16_to_fp32_row(reinterpret_cast<const f16_t*>(src), dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = block_f16_at(src + 2 * i);
}

void convert_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    bf16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = bf16_to_fp32(h);
  }
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  if (const TypeInfo* info = find_type(t)) return info->name;
  // "type<N>" for numbers ggml does not define; a small ring of buffers keeps the pointers
  // valid across a few calls (e.g. two names in one message).
  static thread_local char bufs[4][24];
  static thread_local unsigned next = 0;
  char* buf = bufs[next++ % 4];
  std::snprintf(buf, sizeof bufs[0], "type%u", static_cast<unsigned>(t));
  return buf;
}

bool ggml_type_supported(GgmlType t) {
  const TypeInfo* info = find_type(t);
  return info != nullptr && info->supported;
}

int64_t ggml_block_elems(GgmlType t) { return require_type(t).block_elems; }

size_t ggml_block_bytes(GgmlType t) { return require_type(t).block_bytes; }

size_t ggml_row_bytes(GgmlType t, int64_t n) {
  const TypeInfo& info = require_type(t);
  if (n < 0 || n % info.block_elems != 0) {
    fail("a row of {} elements of type {} is not a whole number of {}-element blocks", n, info.name,
         info.block_elems);
  }
  return static_cast<size_t>(n / info.block_elems) * info.block_bytes;
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  if (!ggml_type_supported(t)) {
    fail("tensor type {} is not supported (supported: {})", ggml_type_name(t), kSupportedList);
  }
  const int64_t nb = static_cast<int64_t>(ggml_row_bytes(t, n) / ggml_block_bytes(t));  // checks n
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::F16: convert_f16(b, dst, n); return;
    case GgmlType::BF16: convert_bf16(b, dst, n); return;
    case GgmlType::Q4_0: dequant_q4_0(b, dst, nb); return;
    case GgmlType::Q4_1: dequant_q4_1(b, dst, nb); return;
    case GgmlType::Q5_0: dequant_q5_0(b, dst, nb); return;
    case GgmlType::Q5_1: dequant_q5_1(b, dst, nb); return;
    case GgmlType::Q8_0: dequant_q8_0(b, dst, nb); return;
    case GgmlType::Q4_K: dequant_q4_k(b, dst, nb); return;
    case GgmlType::Q5_K: dequant_q5_k(b, dst, nb); return;
    case GgmlType::Q6_K: dequant_q6_k(b, dst, nb); return;
    default: break;
  }
  fail("tensor type {} is not supported (supported: {})", ggml_type_name(t), kSupportedList);
}

}  // namespace ragkv
