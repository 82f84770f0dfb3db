// Decoding of GGUF quantised blocks, eight consecutive elements at a time, for the CUDA kernels
// that keep weights quantised on the device (quant-matmul.cu): the same functions compile for the
// host, where tests/test-quant-decode.cpp checks them bit for bit against core/format/quant.cpp's
// dequantize_row — the CPU backend's reference — on every element of random blocks. A device
// kernel built on them therefore sees exactly the values the CPU backend computes with.
//
// Each decoder reproduces dequantize_row's arithmetic operation for operation (the same products
// in the same order, std::fma where it uses std::fma), so the host and device results are
// identical: both round every product and fma once to f32, and f16 fields widen exactly.
// Groups of eight elements never straddle a scale: the legacy types have one scale per
// 32-element block, Q4_K/Q5_K one per 32-element sub-block, Q6_K one per 16 elements.
//
// Layouts (GGUF specification; core/format/quant.cpp says the same in prose):
//   Q4_0 [d f16][qs 16]               element j<16: low nibble of qs[j], j≥16: high nibble of qs[j-16]; (q-8)·d
//   Q4_1 [d][m][qs 16]                as Q4_0 without the -8; fma(q, d, m)
//   Q5_0 [d][qh u32][qs 16]           as Q4_0 plus bit j of qh as the fifth bit; (q-16)·d
//   Q5_1 [d][m][qh u32][qs 16]        as Q5_0 without the -16; fma(q, d, m)
//   Q8_0 [d][qs int8 32]              qs[j]·d
//   Q4_K [d][dmin][scales 12][qs 128] 64-element chunks of 32 bytes: low nibbles then high nibbles,
//                                     sub-block s = e/32 with 6-bit scale and min; fma(d·sc, q, -dmin·m)
//   Q5_K [d][dmin][scales 12][qh 32][qs 128]  as Q4_K plus bit s of qh[e%32] as the fifth bit
//   Q6_K [ql 128][qh 64][scales int8 16][d]   halves of 128 elements: quarter k of a half takes a
//                                     nibble of ql (low for k < 2, high after) and 2 bits of qh; (d·sc)·(q-32)
#pragma once
#include <cmath>
#include <cstdint>

#include "core/format/fp16.h"
#include "core/format/quant.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define RAGKV_HD __host__ __device__ __forceinline__
#else
#define RAGKV_HD inline
#endif

namespace ragkv::quant_decode {

// An f16 field at p (any alignment), widened exactly.
RAGKV_HD float f16_at(const uint8_t* p) {
  const uint16_t bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(bits));
#else
  return fp16_to_fp32(bits);
#endif
}

RAGKV_HD uint32_t u32_at(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

RAGKV_HD float fma_f32(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

// Block geometry and decode8(block, e0, out): out[i] = element e0 + i of the block, e0 a multiple
// of 8 below kElems.
template <GgmlType T>
struct Block;

template <>
struct Block<GgmlType::Q4_0> {
  static constexpr int kElems = 32, kBytes = 18;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const float d = f16_at(b);
    const uint8_t* qs = b + 2 + (e0 & 15);
    const int shift = e0 < 16 ? 0 : 4;
    for (int i = 0; i < 8; ++i) out[i] = (((qs[i] >> shift) & 0x0f) - 8) * d;
  }
};

template <>
struct Block<GgmlType::Q4_1> {
  static constexpr int kElems = 32, kBytes = 20;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint8_t* qs = b + 4 + (e0 & 15);
    const int shift = e0 < 16 ? 0 : 4;
    for (int i = 0; i < 8; ++i) out[i] = fma_f32(float((qs[i] >> shift) & 0x0f), d, m);
  }
};

template <>
struct Block<GgmlType::Q5_0> {
  static constexpr int kElems = 32, kBytes = 22;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const float d = f16_at(b);
    const uint32_t qh = u32_at(b + 2);
    const uint8_t* qs = b + 6 + (e0 & 15);
    const int shift = e0 < 16 ? 0 : 4;
    for (int i = 0; i < 8; ++i) {
      const int q = ((qs[i] >> shift) & 0x0f) | (int((qh >> (e0 + i)) & 1) << 4);
      out[i] = (q - 16) * d;
    }
  }
};

template <>
struct Block<GgmlType::Q5_1> {
  static constexpr int kElems = 32, kBytes = 24;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const float d = f16_at(b), m = f16_at(b + 2);
    const uint32_t qh = u32_at(b + 4);
    const uint8_t* qs = b + 8 + (e0 & 15);
    const int shift = e0 < 16 ? 0 : 4;
    for (int i = 0; i < 8; ++i) {
      const int q = ((qs[i] >> shift) & 0x0f) | (int((qh >> (e0 + i)) & 1) << 4);
      out[i] = fma_f32(float(q), d, m);
    }
  }
};

template <>
struct Block<GgmlType::Q8_0> {
  static constexpr int kElems = 32, kBytes = 34;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const float d = f16_at(b);
    const uint8_t* qs = b + 2 + e0;
    for (int i = 0; i < 8; ++i) out[i] = static_cast<int8_t>(qs[i]) * d;
  }
};

template <>
struct Block<GgmlType::Q4_K> {
  static constexpr int kElems = 256, kBytes = 144;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const int s = e0 / 32;  // sub-block: its scale and min
    int sc, m;
    k4_scale_min(s, b + 4, &sc, &m);
    const float ds = f16_at(b) * sc, ms = f16_at(b + 2) * m;
    const uint8_t* q = b + 16 + (e0 / 64) * 32 + (e0 & 31);
    const int shift = (s & 1) ? 4 : 0;
    for (int i = 0; i < 8; ++i) out[i] = fma_f32(ds, float((q[i] >> shift) & 0x0f), -ms);
  }
};

template <>
struct Block<GgmlType::Q5_K> {
  static constexpr int kElems = 256, kBytes = 176;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const int s = e0 / 32;
    int sc, m;
    k4_scale_min(s, b + 4, &sc, &m);
    const float ds = f16_at(b) * sc, ms = f16_at(b + 2) * m;
    const uint8_t* qh = b + 16 + (e0 & 31);
    const uint8_t* ql = b + 48 + (e0 / 64) * 32 + (e0 & 31);
    const int shift = (s & 1) ? 4 : 0;
    for (int i = 0; i < 8; ++i) {
      const int q = ((ql[i] >> shift) & 0x0f) | (((qh[i] >> s) & 1) << 4);
      out[i] = fma_f32(ds, float(q), -ms);
    }
  }
};

// Q6_K: element l + 32k of a 128-element half (k = 0..3, l < 32) is nibble (k < 2 ? low : high)
// of ql[l + 32·(k & 1)] with bits 2k, 2k+1 of qh[l] above it, minus 32, times d · scales[l/16 + 2k].
template <>
struct Block<GgmlType::Q6_K> {
  static constexpr int kElems = 256, kBytes = 210;
  static RAGKV_HD void decode8(const uint8_t* b, int e0, float* out) {
    const int half = e0 / 128, k = (e0 % 128) / 32, l0 = e0 % 32;
    const uint8_t* ql = b + half * 64 + 32 * (k & 1) + l0;
    const uint8_t* qh = b + 128 + half * 32 + l0;
    const auto sc = static_cast<int8_t>(b[192 + half * 8 + l0 / 16 + 2 * k]);
    const float ds = f16_at(b + 208) * sc;
    const int shift = k < 2 ? 0 : 4;
    for (int i = 0; i < 8; ++i) {
      const int q = (((ql[i] >> shift) & 0x0f) | (((qh[i] >> (2 * k)) & 3) << 4)) - 32;
      out[i] = ds * q;
    }
  }
};

// The types kept quantised on the device: every quantised type the CPU backend dequantises.
RAGKV_HD constexpr bool device_decodable(GgmlType t) {
  return t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::Q5_1 ||
         t == GgmlType::Q8_0 || t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K;
}

// Calls f(Block<T>{}) for the decodable type t; false (f not called) for any other type.
template <typename F>
bool with_block(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0: f(Block<GgmlType::Q4_0>{}); return true;
    case GgmlType::Q4_1: f(Block<GgmlType::Q4_1>{}); return true;
    case GgmlType::Q5_0: f(Block<GgmlType::Q5_0>{}); return true;
    case GgmlType::Q5_1: f(Block<GgmlType::Q5_1>{}); return true;
    case GgmlType::Q8_0: f(Block<GgmlType::Q8_0>{}); return true;
    case GgmlType::Q4_K: f(Block<GgmlType::Q4_K>{}); return true;
    case GgmlType::Q5_K: f(Block<GgmlType::Q5_K>{}); return true;
    case GgmlType::Q6_K: f(Block<GgmlType::Q6_K>{}); return true;
    default: return false;
  }
}

}  // namespace ragkv::quant_decode
