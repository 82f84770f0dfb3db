// quantize_row: round-to-nearest encoders for the GGUF block layouts of core/format/quant.cpp (the
// layouts follow the GGUF specification; each encoder writes exactly what its dequantiser there
// reads). Scales and mins are rounded to f16 first and the elements quantised against the rounded
// values, so the f16 rounding does not add to the element error.
#include "core/format/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/format/fp16.h"
#include "core/util/error.h"

namespace ragkv {

namespace {

constexpr int QK = 32;     // elements per legacy block
constexpr int QK_K = 256;  // elements per K-quant super-block

int round_int(float v) { return static_cast<int>(std::nearbyint(v)); }
int clamp_int(int v, int lo, int hi) { return std::min(std::max(v, lo), hi); }

// Stores v as f16 at p (unaligned) and returns the value the dequantiser will read.
float put_f16(uint8_t* p, float v) {
  const f16_t h = fp32_to_fp16(v);
  std::memcpy(p, &h, sizeof h);
  return fp16_to_fp32(h);
}

// The value of largest magnitude, with its sign.
float signed_absmax(const float* x, int n) {
  float m = 0.f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  return m;
}

// ---- legacy 32-element blocks (the layouts of dequant_q4_0 ... dequant_q8_0) ------------------
// Byte j of qs holds element j in its low nibble and element j+16 in its high nibble; bit j of
// qh holds the fifth bit of element j.

// Symmetric types (Q4_0, Q5_0): d = m / -half where m is the block's value of largest magnitude,
// so m itself lands on the most negative code and the full range of codes is used; q = x/d + half.
// The opposite extreme −m would need code 2·half and is clamped to 2·half − 1 (error up to d).
template <int Bits>
void quantize_symmetric(const float* x, uint8_t* b, int64_t nb) {
  constexpr int half = 1 << (Bits - 1), top = (1 << Bits) - 1;
  constexpr size_t bytes = Bits == 4 ? 2 + QK / 2 : 2 + 4 + QK / 2;
  for (int64_t i = 0; i < nb; ++i, x += QK, b += bytes) {
    const float d = put_f16(b, signed_absmax(x, QK) / -half);
    const float id = d != 0.f ? 1.f / d : 0.f;
    uint8_t* qs = b + (Bits == 4 ? 2 : 6);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = clamp_int(round_int(x[j] * id) + half, 0, top);
      const int q1 = clamp_int(round_int(x[j + QK / 2] * id) + half, 0, top);
      qs[j] = uint8_t((q0 & 0x0f) | (q1 & 0x0f) << 4);
      qh |= uint32_t(q0 >> 4) << j | uint32_t(q1 >> 4) << (j + QK / 2);
    }
    if (Bits == 5) std::memcpy(b + 2, &qh, 4);
  }
}

// Types with a min (Q4_1, Q5_1): x = d·q + m with m the block's minimum, d = (max − min) / top.
template <int Bits>
void quantize_with_min(const float* x, uint8_t* b, int64_t nb) {
  constexpr int top = (1 << Bits) - 1;
  constexpr size_t bytes = Bits == 4 ? 2 + 2 + QK / 2 : 2 + 2 + 4 + QK / 2;
  for (int64_t i = 0; i < nb; ++i, x += QK, b += bytes) {
    const auto [lo, hi] = std::minmax_element(x, x + QK);
    const float d = put_f16(b, (*hi - *lo) / top);
    const float m = put_f16(b + 2, *lo);
    const float id = d != 0.f ? 1.f / d : 0.f;
    uint8_t* qs = b + (Bits == 4 ? 4 : 8);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; ++j) {
      const int q0 = clamp_int(round_int((x[j] - m) * id), 0, top);
      const int q1 = clamp_int(round_int((x[j + QK / 2] - m) * id), 0, top);
      qs[j] = uint8_t((q0 & 0x0f) | (q1 & 0x0f) << 4);
      qh |= uint32_t(q0 >> 4) << j | uint32_t(q1 >> 4) << (j + QK / 2);
    }
    if (Bits == 5) std::memcpy(b + 4, &qh, 4);
  }
}

// Q8_0: d = max|x| / 127, q = x / d.
void quantize_q8_0(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK, b += 2 + QK) {
    const float d = put_f16(b, std::fabs(signed_absmax(x, QK)) / 127.f);
    const float id = d != 0.f ? 1.f / d : 0.f;
    for (int j = 0; j < QK; ++j) b[2 + j] = uint8_t(int8_t(clamp_int(round_int(x[j] * id), -127, 127)));
  }
}

// ---- K-quants (256-element super-blocks) ------------------------------------------------------

// Q4_K / Q5_K: eight sub-blocks of 32, x = d·sc_j·q − dmin·m_j with 6-bit sc_j and m_j and q in
// [0, top]. Per sub-block the ideal step is (max − min)/top and the ideal offset −min, the min
// taken ≤ 0 (the layout subtracts a non-negative m_j). d and dmin are the largest of these over
// 63; each sub-block's codes round its step and offset to the nearest multiple of d and dmin.
// The sub-block's elements are then rounded against the step and offset the dequantiser will use.
template <int Bits>
void quantize_k_with_min(const float* x, uint8_t* b, int64_t nb) {
  constexpr int top = (1 << Bits) - 1;
  constexpr size_t bytes = Bits == 4 ? 144 : 176;
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += bytes) {
    float step[8], offset[8];
    float max_step = 0.f, max_offset = 0.f;
    for (int j = 0; j < 8; ++j) {
      const auto [lo, hi] = std::minmax_element(x + 32 * j, x + 32 * j + 32);
      const float mn = std::min(*lo, 0.f);
      step[j] = (*hi - mn) / top;
      offset[j] = -mn;
      max_step = std::max(max_step, step[j]);
      max_offset = std::max(max_offset, offset[j]);
    }
    const float d = put_f16(b, max_step / 63.f);
    const float dmin = put_f16(b + 2, max_offset / 63.f);
    uint8_t* scales = b + 4;
    uint8_t* qh = b + 16;                      // Q5_K only: 32 bytes of fifth bits
    uint8_t* qs = b + (Bits == 4 ? 16 : 48);  // 128 bytes of nibbles
    std::memset(scales, 0, 12);
    std::memset(qh, 0, Bits == 5 ? 32 : 0);
    for (int j = 0; j < 8; ++j) {
      const int sc = d > 0.f ? clamp_int(round_int(step[j] / d), 0, 63) : 0;
      const int m = dmin > 0.f ? clamp_int(round_int(offset[j] / dmin), 0, 63) : 0;
      // The 12-byte packing read by k4_scale_min (core/format/quant.h).
      if (j < 4) {
        scales[j] = uint8_t(sc);
        scales[j + 4] = uint8_t(m);
      } else {
        scales[j + 4] = uint8_t((sc & 0x0f) | (m & 0x0f) << 4);
        scales[j - 4] |= uint8_t((sc >> 4) << 6);
        scales[j] |= uint8_t((m >> 4) << 6);
      }
      const float de = d * sc, me = dmin * m;
      const float ide = de > 0.f ? 1.f / de : 0.f;
      // Sub-block j's element l: nibble (low for even j, high for odd) of qs[32·(j/2) + l].
      uint8_t* q = qs + 32 * (j / 2);
      const int shift = (j % 2) * 4;
      for (int l = 0; l < 32; ++l) {
        const int v = clamp_int(round_int((x[32 * j + l] + me) * ide), 0, top);
        q[l] = uint8_t(q[l] & ~(0x0f << shift)) | uint8_t((v & 0x0f) << shift);
        if (Bits == 5) qh[l] |= uint8_t((v >> 4) << j);
      }
    }
  }
}

// Q6_K: sixteen sub-blocks of 16, x = d·sc_k·(q − 32) with signed 8-bit sc_k and q in [0, 63].
// Symmetric: the ideal step is max|x| / 31 per sub-block (codes −31..31 of −32..31), d the largest
// step over 127, sc_k the step rounded to a multiple of d.
void quantize_q6_k(const float* x, uint8_t* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += QK_K, b += 210) {
    float step[16], max_step = 0.f;
    for (int k = 0; k < 16; ++k) {
      step[k] = std::fabs(signed_absmax(x + 16 * k, 16)) / 31.f;
      max_step = std::max(max_step, step[k]);
    }
    uint8_t* ql = b;
    uint8_t* qh = b + 128;
    int8_t* scales = reinterpret_cast<int8_t*>(b + 192);
    const float d = put_f16(b + 208, max_step / 127.f);
    uint8_t q[QK_K];
    for (int k = 0; k < 16; ++k) {
      const int sc = d > 0.f ? clamp_int(round_int(step[k] / d), 0, 127) : 0;
      scales[k] = int8_t(sc);
      const float de = d * sc, ide = de > 0.f ? 1.f / de : 0.f;
      for (int l = 0; l < 16; ++l) q[16 * k + l] = uint8_t(clamp_int(round_int(x[16 * k + l] * ide), -32, 31) + 32);
    }
    // The packing read by dequant_q6_k: per 128-element half, element l (of 32) and l + 64 share
    // ql[l], l + 32 and l + 96 share ql[l + 32]; qh[l] holds the top two bits of all four.
    for (int h = 0; h < 2; ++h) {
      const uint8_t* e = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        ql[64 * h + l] = uint8_t((e[l] & 0x0f) | (e[l + 64] & 0x0f) << 4);
        ql[64 * h + l + 32] = uint8_t((e[l + 32] & 0x0f) | (e[l + 96] & 0x0f) << 4);
        qh[32 * h + l] = uint8_t((e[l] >> 4) | (e[l + 32] >> 4) << 2 | (e[l + 64] >> 4) << 4 | (e[l + 96] >> 4) << 6);
      }
    }
  }
}

}  // namespace

bool ggml_type_quantizable(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
    case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  if (!ggml_type_quantizable(t))
    fail("cannot write tensor type {} (writable: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K)",
         ggml_type_name(t));
  const int64_t nb = static_cast<int64_t>(ggml_row_bytes(t, n) / ggml_block_bytes(t));  // checks n
  auto* b = static_cast<uint8_t*>(dst);
  switch (t) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put_f16(b + 2 * i, src[i]);
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        const bf16_t h = fp32_to_bf16(src[i]);
        std::memcpy(b + 2 * i, &h, sizeof h);
      }
      return;
    case GgmlType::Q4_0: quantize_symmetric<4>(src, b, nb); return;
    case GgmlType::Q5_0: quantize_symmetric<5>(src, b, nb); return;
    case GgmlType::Q4_1: quantize_with_min<4>(src, b, nb); return;
    case GgmlType::Q5_1: quantize_with_min<5>(src, b, nb); return;
    case GgmlType::Q8_0: quantize_q8_0(src, b, nb); return;
    case GgmlType::Q4_K: quantize_k_with_min<4>(src, b, nb); return;
    case GgmlType::Q5_K: quantize_k_with_min<5>(src, b, nb); return;
    case GgmlType::Q6_K: quantize_q6_k(src, b, nb); return;
    default: break;
  }
}

}  // namespace ragkv
