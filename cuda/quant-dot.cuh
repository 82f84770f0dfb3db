// Integer dot products of quantised weight blocks with 8-bit activation blocks, for the CUDA
// decode GEMV (int8-gemv.cu): the CPU backend's block8 products (core/backend/quant-kernels.h and
// quant-kernels-scalar.cpp, whose formulas these are) done with dp4a, four 8-bit products and
// their sum per instruction, instead of decoding every weight to f32 for an FMA with an f32
// activation (quant-matmul.cu's quant_gemv): a Q4_K value then costs about a sixth of the
// instructions, which is what keeps a decode step on the weights' bytes rather than on the ALUs.
//
// The same functions compile for the host (tests/test-quant-dot.cpp), where dp4a is emulated, so
// the host can compute exactly what a kernel computes: the activation blocks bit for bit as the
// CPU's quantize_act32 / quantize_act256, every integer sum exact, and each block's f32 term with
// the same operations (explicit fma, so no compiler contracts differently on either side).
//
// Activations (quantize_act_*): per block of 32 values (the legacy types) or 256 (the K-quants),
//   d = max |x| / 127, q = round-to-nearest-even(x · 127 / max |x|) (NaN → −128),
// with d · Σq per 32-block (dsum: what a legacy weight's offset or min multiplies) or Σq per 16
// values (bsum: the K-quants' mins; Q6_K's offset is subtracted in its weight bytes instead). Stored as three arrays on the device (not the
// CPU's interleaved structs, so the kernel's loads of q are 16-byte aligned): q [rows][cols] int8,
// d [rows][cols / block], and dsum [rows][cols / 32] or bsum [rows][cols / 16].
//
// Weights: a block is read by kLanes lanes (the K-quants: 8 lanes of 32 values; the legacy types:
// one lane per 32-value block). load(block, part) gathers a lane's weight words (four values per
// 32-bit word, in the byte order of the activations' q) and its scales; dot() returns the lane's
// share of the block's f32 term for one activation row:
//   legacy  dw·da·Σ q·qa + coef·dsum        coef = −8·dw (Q4_0), −16·dw (Q5_0), m (Q4_1, Q5_1), 0 (Q8_0)
//   Q4/5_K  d·da·Σ_s sc_s·Σ q·qa − dmin·da·Σ_s m_s·Σ qa
//   Q6_K    d·da·Σ_s sc_s·Σ (q − 32)·qa
// The lanes' shares of a block add up (in f32) to the CPU's term for that block, whose integer
// sums they split exactly; only the order f32 terms are added differs from the CPU's.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/format/quant.h"
#include "cuda/quant-decode.cuh"

namespace ragkv::quant_dot {

using quant_decode::fma_f32;

// ---- word loads and byte-wise integer ops (device instructions, emulated on the host)

// 32 bits at p, p 2-byte aligned (the legacy blocks and Q6_K are 18, 22, 34 or 210 bytes long).
RAGKV_HD uint32_t u32_a2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return uint32_t(h[0]) | (uint32_t(h[1]) << 16);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// 32 bits at p, p 4-byte aligned.
RAGKV_HD uint32_t u32_a4(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
#endif
}

// f16 bits widened exactly to f32.
RAGKV_HD float f16_bits(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits & 0xffffu)));
#else
  return fp16_to_fp32(static_cast<uint16_t>(bits & 0xffffu));
#endif
}

// The f16 field at p, p 2-byte aligned (one 16-bit load instead of two byte loads).
RAGKV_HD float f16_a2(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return f16_bits(*reinterpret_cast<const uint16_t*>(p));
#else
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_bits(h);
#endif
}

// 16 bytes at p, p 16-byte aligned, as four words.
RAGKV_HD void u32x4_a16(const void* p, uint32_t* w) {
#if defined(__CUDA_ARCH__)
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  w[0] = v.x;
  w[1] = v.y;
  w[2] = v.z;
  w[3] = v.w;
#else
  std::memcpy(w, p, 16);
#endif
}

// 8 bytes at p, p 8-byte aligned, as two words.
RAGKV_HD void u32x2_a8(const void* p, uint32_t* w) {
#if defined(__CUDA_ARCH__)
  const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
  w[0] = v.x;
  w[1] = v.y;
#else
  std::memcpy(w, p, 8);
#endif
}

// c + Σ_k (signed byte k of a) · (signed byte k of b).
RAGKV_HD int dp4a(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 4; ++k) c += int(int8_t(uint8_t(a >> (8 * k)))) * int(int8_t(uint8_t(b >> (8 * k))));
  return c;
#endif
}

// Each byte minus 32, modulo 256 (bytes of 0..63 become signed −32..31).
RAGKV_HD uint32_t bytes_minus_32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return __vsub4(v, 0x20202020u);
#else
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k) r |= uint32_t(uint8_t(uint8_t(v >> (8 * k)) - 32)) << (8 * k);
  return r;
#endif
}

// Bits 0..3 of x to bit 4 of bytes 0..3 (a legacy Q5 block's fifth bits, four elements at a time).
RAGKV_HD uint32_t fifth_bits(uint32_t x) {
  return ((x & 1u) << 4) | ((x & 2u) << 11) | ((x & 4u) << 18) | ((x & 8u) << 25);
}

// ---- activation blocks

// d = amax / 127 and the reciprocal that rounds (0 for an all-zero block): the CPU's act_scale.
RAGKV_HD void act_scale(float amax, float* d, float* id) {
  *d = amax / 127.f;
  *id = amax > 0.f ? 127.f / amax : 0.f;
}

// round-to-nearest-even(v), NaN → −128: the CPU's act_round.
RAGKV_HD int8_t act_round(float v) {
  if (v != v) return int8_t(-128);
#if defined(__CUDA_ARCH__)
  return static_cast<int8_t>(__float2int_rn(v));
#else
  return static_cast<int8_t>(std::nearbyint(v));
#endif
}

// The arrays of ActQ8 (below) as a kernel writes them (int8-gemv.cuh's act_q8_outputs,
// act-quantize.cuh).
struct ActQ8Out {
  int8_t* q = nullptr;
  float* d = nullptr;
  float* dsum = nullptr;
  int16_t* bsum = nullptr;
};

// The activation blocks of one matrix on the device (layout above). One format per weight type:
// 32-value blocks with dsum for the legacy types, 256-value blocks with bsum for the K-quants.
struct ActQ8 {
  const int8_t* q = nullptr;     // [rows][cols]
  const float* d = nullptr;      // [rows][cols / block]
  const float* dsum = nullptr;   // [rows][cols / 32], legacy blocks
  const int16_t* bsum = nullptr; // [rows][cols / 16], K-quant blocks
  int64_t cols = 0;
};

// ---- weight lanes

// The legacy types: one lane reads a whole 32-value block (lo: elements 4i..4i+3, hi: 16+4i..).
struct LegacyLane {
  uint32_t lo[4], hi[4];
  float dw, coef;
};

// Σ q·qa of a legacy lane against its activation block, qa its 32 values.
RAGKV_HD int legacy_dot(const LegacyLane& w, const int8_t* qa) {
  uint32_t a[8];
  u32x4_a16(qa, a);
  u32x4_a16(qa + 16, a + 4);
  int s = 0;
  for (int i = 0; i < 4; ++i) s = dp4a(w.lo[i], a[i], s);
  for (int i = 0; i < 4; ++i) s = dp4a(w.hi[i], a[4 + i], s);
  return s;
}

template <GgmlType T>
struct Lane;

// Nibbles of 16 bytes (2-byte aligned) into lo/hi words.
RAGKV_HD void nibbles_a2(const uint8_t* qs, LegacyLane& w) {
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = u32_a2(qs + 4 * i);
    w.lo[i] = v & 0x0f0f0f0fu;
    w.hi[i] = (v >> 4) & 0x0f0f0f0fu;
  }
}

RAGKV_HD void nibbles_a4(const uint8_t* qs, LegacyLane& w) {
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = u32_a4(qs + 4 * i);
    w.lo[i] = v & 0x0f0f0f0fu;
    w.hi[i] = (v >> 4) & 0x0f0f0f0fu;
  }
}

RAGKV_HD void add_fifth_bits(uint32_t qh, LegacyLane& w) {
  for (int i = 0; i < 4; ++i) {
    w.lo[i] |= fifth_bits(qh >> (4 * i));
    w.hi[i] |= fifth_bits(qh >> (16 + 4 * i));
  }
}

// A legacy lane's term: dw·da·Σ q·qa + coef·(da·Σqa). a_block: the block's index in the row.
RAGKV_HD float legacy_term(const LegacyLane& w, const ActQ8& a, int64_t row, int64_t a_block) {
  const int64_t blk = row * (a.cols / 32) + a_block;
  const int s = legacy_dot(w, a.q + row * a.cols + a_block * 32);
  return fma_f32(w.coef, a.dsum[blk], (w.dw * a.d[blk]) * float(s));
}

// What the legacy lanes share: one lane per 32-value block, the term of legacy_term.
struct LegacyBlockLane {
  static constexpr int kElems = 32, kLanes = 1;
  using Words = LegacyLane;
  static RAGKV_HD float dot(const Words& w, int /*part*/, const ActQ8& a, int64_t row, int64_t blk) {
    return legacy_term(w, a, row, blk);
  }
};

template <>
struct Lane<GgmlType::Q4_0> : LegacyBlockLane {
  static constexpr GgmlType kType = GgmlType::Q4_0;
  static constexpr int kBytes = 18;
  static RAGKV_HD Words load(const uint8_t* b, int /*part*/) {
    Words w;
    w.dw = f16_a2(b);
    w.coef = -8.f * w.dw;
    nibbles_a2(b + 2, w);
    return w;
  }
};

template <>
struct Lane<GgmlType::Q4_1> : LegacyBlockLane {
  static constexpr GgmlType kType = GgmlType::Q4_1;
  static constexpr int kBytes = 20;
  static RAGKV_HD Words load(const uint8_t* b, int /*part*/) {
    Words w;
    w.dw = f16_a2(b);
    w.coef = f16_a2(b + 2);
    nibbles_a4(b + 4, w);
    return w;
  }
};

template <>
struct Lane<GgmlType::Q5_0> : LegacyBlockLane {
  static constexpr GgmlType kType = GgmlType::Q5_0;
  static constexpr int kBytes = 22;
  static RAGKV_HD Words load(const uint8_t* b, int /*part*/) {
    Words w;
    w.dw = f16_a2(b);
    w.coef = -16.f * w.dw;
    nibbles_a2(b + 6, w);
    add_fifth_bits(u32_a2(b + 2), w);
    return w;
  }
};

template <>
struct Lane<GgmlType::Q5_1> : LegacyBlockLane {
  static constexpr GgmlType kType = GgmlType::Q5_1;
  static constexpr int kBytes = 24;
  static RAGKV_HD Words load(const uint8_t* b, int /*part*/) {
    Words w;
    w.dw = f16_a2(b);
    w.coef = f16_a2(b + 2);
    nibbles_a4(b + 8, w);
    add_fifth_bits(u32_a4(b + 4), w);
    return w;
  }
};

template <>
struct Lane<GgmlType::Q8_0> : LegacyBlockLane {
  static constexpr GgmlType kType = GgmlType::Q8_0;
  static constexpr int kBytes = 34;  // lo: elements 0..15, hi: 16..31 (signed bytes as they lie)
  static RAGKV_HD Words load(const uint8_t* b, int /*part*/) {
    Words w;
    w.dw = f16_a2(b);
    w.coef = 0.f;
    for (int i = 0; i < 4; ++i) {
      w.lo[i] = u32_a2(b + 2 + 4 * i);
      w.hi[i] = u32_a2(b + 18 + 4 * i);
    }
    return w;
  }
};

// Q4_K and Q5_K: lane part j of 8 takes 16 bytes of 64-value chunk c = j / 2, half h = j % 2:
// positions 16h..16h+15 of sub-blocks 2c (low nibbles) and 2c + 1 (high nibbles).
struct KLane {
  uint32_t lo[4], hi[4];
  int sc0, sc1, m0, m1;
  float d, dmin;
};

// k4_scale_min (core/format/quant.h) from the 12 scale bytes as three words q[0..3], q[4..7],
// q[8..11]: the same bits, with shifts instead of byte loads.
RAGKV_HD void k4_scale_min_words(int j, const uint32_t* q, int* sc, int* m) {
  const auto byte = [&](int i) { return int((q[i / 4] >> (8 * (i % 4))) & 0xffu); };
  if (j < 4) {
    *sc = byte(j) & 63;
    *m = byte(j + 4) & 63;
  } else {
    *sc = (byte(j + 4) & 0x0f) | ((byte(j - 4) >> 6) << 4);
    *m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

template <bool kFifthBit>
RAGKV_HD KLane load_q45_k(const uint8_t* b, int j) {
  const int c = j / 2, h = j % 2;
  KLane w;
  const uint32_t d_dmin = u32_a4(b);  // blocks of 144 and 176 bytes: 16-byte aligned
  w.d = f16_bits(d_dmin);
  w.dmin = f16_bits(d_dmin >> 16);
  const uint32_t sc[3] = {u32_a4(b + 4), u32_a4(b + 8), u32_a4(b + 12)};
  k4_scale_min_words(2 * c, sc, &w.sc0, &w.m0);
  k4_scale_min_words(2 * c + 1, sc, &w.sc1, &w.m1);
  uint32_t q[4];
  u32x4_a16(b + (kFifthBit ? 48 : 16) + 32 * c + 16 * h, q);
  for (int i = 0; i < 4; ++i) {
    w.lo[i] = q[i] & 0x0f0f0f0fu;
    w.hi[i] = (q[i] >> 4) & 0x0f0f0f0fu;
  }
  if (kFifthBit) {  // bit s of qh[l] is the fifth bit of element l of sub-block s
    uint32_t qh[4];
    u32x4_a16(b + 16 + 16 * h, qh);
    for (int i = 0; i < 4; ++i) {
      w.lo[i] |= ((qh[i] >> (2 * c)) & 0x01010101u) << 4;
      w.hi[i] |= ((qh[i] >> (2 * c + 1)) & 0x01010101u) << 4;
    }
  }
  return w;
}

RAGKV_HD float dot_q45_k(const KLane& w, int j, const ActQ8& a, int64_t row, int64_t blk) {
  const int c = j / 2, h = j % 2;
  const int8_t* qa = a.q + row * a.cols + blk * 256 + 64 * c + 16 * h;
  uint32_t a0[4], a1[4];
  u32x4_a16(qa, a0);       // sub-block 2c
  u32x4_a16(qa + 32, a1);  // sub-block 2c + 1
  int d0 = 0, d1 = 0;
  for (int i = 0; i < 4; ++i) {
    d0 = dp4a(w.lo[i], a0[i], d0);
    d1 = dp4a(w.hi[i], a1[i], d1);
  }
  const int16_t* bs = a.bsum + row * (a.cols / 16) + blk * 16;  // group g: values 16g..16g+15
  const int sumi = w.sc0 * d0 + w.sc1 * d1;
  const int summ = w.m0 * bs[4 * c + h] + w.m1 * bs[4 * c + 2 + h];
  const float da = a.d[row * (a.cols / 256) + blk];
  return fma_f32(-(w.dmin * da), float(summ), (w.d * da) * float(sumi));
}

template <>
struct Lane<GgmlType::Q4_K> {
  static constexpr GgmlType kType = GgmlType::Q4_K;
  static constexpr int kElems = 256, kBytes = 144, kLanes = 8;
  using Words = KLane;
  static RAGKV_HD Words load(const uint8_t* b, int j) { return load_q45_k<false>(b, j); }
  static RAGKV_HD float dot(const Words& w, int j, const ActQ8& a, int64_t row, int64_t blk) {
    return dot_q45_k(w, j, a, row, blk);
  }
};

template <>
struct Lane<GgmlType::Q5_K> {
  static constexpr GgmlType kType = GgmlType::Q5_K;
  static constexpr int kElems = 256, kBytes = 176, kLanes = 8;
  using Words = KLane;
  static RAGKV_HD Words load(const uint8_t* b, int j) { return load_q45_k<true>(b, j); }
  static RAGKV_HD float dot(const Words& w, int j, const ActQ8& a, int64_t row, int64_t blk) {
    return dot_q45_k(w, j, a, row, blk);
  }
};

// Q6_K: lane part j of 8 takes half = j / 4 and l in [l0, l0 + 8), l0 = 8·(j % 4): for quarter
// k = 0..3 the elements l + 32k of the half (signed q − 32, two words each), under the 16-value
// scale sc[8·half + l0/16 + 2k].
struct Q6Lane {
  uint32_t v[4][2];
  int sc[4];
  float d;
};

template <>
struct Lane<GgmlType::Q6_K> {
  static constexpr GgmlType kType = GgmlType::Q6_K;
  static constexpr int kElems = 256, kBytes = 210, kLanes = 8;
  using Words = Q6Lane;
  static RAGKV_HD Words load(const uint8_t* b, int j) {
    const int half = j / 4, l0 = 8 * (j % 4);
    const uint8_t* ql = b + 64 * half + l0;
    const uint8_t* qh = b + 128 + 32 * half + l0;
    Words w;
    for (int i = 0; i < 2; ++i) {
      const uint32_t a = u32_a2(ql + 4 * i), c = u32_a2(ql + 32 + 4 * i), h = u32_a2(qh + 4 * i);
      w.v[0][i] = bytes_minus_32((a & 0x0f0f0f0fu) | ((h & 0x03030303u) << 4));
      w.v[1][i] = bytes_minus_32((c & 0x0f0f0f0fu) | (((h >> 2) & 0x03030303u) << 4));
      w.v[2][i] = bytes_minus_32(((a >> 4) & 0x0f0f0f0fu) | (((h >> 4) & 0x03030303u) << 4));
      w.v[3][i] = bytes_minus_32(((c >> 4) & 0x0f0f0f0fu) | (((h >> 6) & 0x03030303u) << 4));
    }
    for (int k = 0; k < 4; ++k) w.sc[k] = static_cast<int8_t>(b[192 + 8 * half + l0 / 16 + 2 * k]);
    w.d = f16_a2(b + 208);
    return w;
  }
  static RAGKV_HD float dot(const Words& w, int j, const ActQ8& a, int64_t row, int64_t blk) {
    const int half = j / 4, l0 = 8 * (j % 4);
    const int8_t* qa = a.q + row * a.cols + blk * 256 + 128 * half + l0;
    int sumi = 0;
    for (int k = 0; k < 4; ++k) {
      uint32_t aw[2];
      u32x2_a8(qa + 32 * k, aw);
      sumi += w.sc[k] * dp4a(w.v[k][1], aw[1], dp4a(w.v[k][0], aw[0], 0));
    }
    const float da = a.d[row * (a.cols / 256) + blk];
    // fma(·, ·, 0): the product rounded once, as a plain multiply, which nvcc would otherwise fuse
    // into the caller's accumulation (the other types end in an fma already) and the host would not.
    return fma_f32(w.d * da, float(sumi), 0.f);
  }
};

// The types with lanes here: every type the device keeps quantised.
template <typename F>
bool with_lane(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_0: f(Lane<GgmlType::Q4_0>{}); return true;
    case GgmlType::Q4_1: f(Lane<GgmlType::Q4_1>{}); return true;
    case GgmlType::Q5_0: f(Lane<GgmlType::Q5_0>{}); return true;
    case GgmlType::Q5_1: f(Lane<GgmlType::Q5_1>{}); return true;
    case GgmlType::Q8_0: f(Lane<GgmlType::Q8_0>{}); return true;
    case GgmlType::Q4_K: f(Lane<GgmlType::Q4_K>{}); return true;
    case GgmlType::Q5_K: f(Lane<GgmlType::Q5_K>{}); return true;
    case GgmlType::Q6_K: f(Lane<GgmlType::Q6_K>{}); return true;
    default: return false;
  }
}

// The activation block size a type's lanes read: 32 (legacy) or 256 (K-quants).
constexpr int act_block(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K ? 256 : 32;
}

}  // namespace ragkv::quant_dot
