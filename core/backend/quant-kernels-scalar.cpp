// The portable kernel table of quant-kernels.h: plain C++ over the GGUF block layouts
// (core/format/quant.cpp documents them), one weight row against one activation row at a time. It is
// the reference the SIMD tables are tested against and the fallback on CPUs without AVX2.
//
// Per weight block b of scale dw (and min or offset) against activation block (da, q):
//   Q4_0  dw·da·Σ q4·qa − 8·dw·(da·Σ qa)        Q4_1  dw·da·Σ q4·qa + mw·(da·Σ qa)
//   Q5_0  dw·da·Σ q5·qa − 16·dw·(da·Σ qa)       Q5_1  dw·da·Σ q5·qa + mw·(da·Σ qa)
//   Q8_0  dw·da·Σ q8·qa
//   Q4_K, Q5_K  d·da·Σ_s sc_s·Σ q·qa − dmin·da·Σ_s m_s·Σ qa   (8 sub-blocks of 32)
//   Q6_K  d·da·Σ_s sc_s·(Σ q6·qa − 32·Σ qa)                    (16 sub-blocks of 16)
// with every Σ over integers exact, so the tables differ only in how the f32 terms are added.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/backend/quant-kernels.h"
#include "core/format/fp16.h"

namespace ragkv {

namespace {

// max |x| / qmax and the reciprocal used to round (0 for an all-zero block); qmax is 127 for 8-bit
// blocks, 32767 for 16-bit ones. The AVX2 table computes the same two numbers with the same
// operations, so the quantised values are equal.
inline void act_scale(const float* x, int n, float qmax, float* d, float* id) {
  float amax = 0.f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  *d = amax / qmax;
  *id = amax > 0.f ? qmax / amax : 0.f;
}

// Round to nearest, ties to even (the default rounding mode, as the SIMD round instruction). A NaN
// (an activation of a corrupt model) becomes -128, as the AVX2 conversion and saturating packs
// make it, rather than an undefined float-to-int conversion.
inline int8_t act_round(float v) { return v == v ? static_cast<int8_t>(std::nearbyint(v)) : int8_t(-128); }

void quantize_act32(const float* x, ActBlock32* y, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float d, id;
    act_scale(x, 32, 127.f, &d, &id);
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      y[b].q[i] = act_round(x[i] * id);
      sum += y[b].q[i];
    }
    y[b].d = d;
    y[b].dsum = d * float(sum);
  }
}

// 16-bit blocks: d = max |x| / 32767, q = x · (32767 / max |x|) rounded to nearest even and
// saturated, NaN to -32768 (as the AVX2 conversion and packs make them).
void quantize_act32_wide(const float* x, ActBlock32W* y, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float d, id;
    act_scale(x, 32, 32767.f, &d, &id);
    for (int i = 0; i < 32; ++i) {
      const float v = x[i] * id;
      y[b].q[i] = v == v ? static_cast<int16_t>(std::clamp(std::nearbyint(v), -32768.f, 32767.f)) : int16_t(-32768);
    }
    y[b].d = d;
  }
}

void quantize_act256(const float* x, ActBlock256* y, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b, x += 256) {
    float d, id;
    act_scale(x, 256, 127.f, &d, &id);
    y[b].d = d;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) {
        y[b].q[16 * g + i] = act_round(x[16 * g + i] * id);
        sum += y[b].q[16 * g + i];
      }
      y[b].bsum[g] = static_cast<int16_t>(sum);
    }
  }
}

// ---- legacy 32-element blocks: the 32 unsigned (Q4/Q5) or signed (Q8) weight values of a block

// Q4: byte j of qs holds element j (low nibble) and element j + 16 (high nibble).
inline void unpack_q4(const uint8_t* qs, int* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 0x0f;
    q[j + 16] = qs[j] >> 4;
  }
}

// Q5: as Q4, with bit j of qh the fifth bit of element j.
inline void unpack_q5(const uint8_t* qs, uint32_t qh, int* q) {
  unpack_q4(qs, q);
  for (int j = 0; j < 32; ++j) q[j] |= int((qh >> j) & 1) << 4;
}

inline int dot32(const int* q, const int8_t* a) {
  int s = 0;
  for (int j = 0; j < 32; ++j) s += q[j] * a[j];
  return s;
}

// One weight row of nb legacy blocks against one activation row. Block: the weight's values,
// its scale dw and the coefficient of the activation block's d·Σq (−8·dw, mw, …).
template <typename Block>
float dot_legacy(const uint8_t* w, const ActBlock32* a, int64_t nb, size_t block_bytes, Block block) {
  float acc = 0.f;
  int q[32];
  for (int64_t b = 0; b < nb; ++b, w += block_bytes) {
    float dw, coef;
    block(w, q, &dw, &coef);
    acc += dw * a[b].d * float(dot32(q, a[b].q)) + coef * a[b].dsum;
  }
  return acc;
}

template <typename Block>
void gemm_legacy(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w,
                 size_t w_stride, float* y, int64_t ldy, size_t block_bytes, Block block) {
  for (int64_t i = 0; i < m; ++i) {
    const auto* a = reinterpret_cast<const ActBlock32*>(static_cast<const uint8_t*>(x) + i * x_stride);
    for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = dot_legacy(w + j * w_stride, a, k / 32, block_bytes, block);
  }
}

void gemm_q4_0(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_legacy(m, n, k, x, xs, w, ws, y, ldy, 18, [](const uint8_t* b, int* q, float* dw, float* coef) {
    *dw = block_f16_at(b);
    *coef = -8.f * *dw;
    unpack_q4(b + 2, q);
  });
}

void gemm_q4_1(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_legacy(m, n, k, x, xs, w, ws, y, ldy, 20, [](const uint8_t* b, int* q, float* dw, float* coef) {
    *dw = block_f16_at(b);
    *coef = block_f16_at(b + 2);
    unpack_q4(b + 4, q);
  });
}

void gemm_q5_0(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_legacy(m, n, k, x, xs, w, ws, y, ldy, 22, [](const uint8_t* b, int* q, float* dw, float* coef) {
    *dw = block_f16_at(b);
    *coef = -16.f * *dw;
    unpack_q5(b + 6, block_u32_at(b + 2), q);
  });
}

void gemm_q5_1(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_legacy(m, n, k, x, xs, w, ws, y, ldy, 24, [](const uint8_t* b, int* q, float* dw, float* coef) {
    *dw = block_f16_at(b);
    *coef = block_f16_at(b + 2);
    unpack_q5(b + 8, block_u32_at(b + 4), q);
  });
}

void gemm_q8_0(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_legacy(m, n, k, x, xs, w, ws, y, ldy, 34, [](const uint8_t* b, int* q, float* dw, float* coef) {
    *dw = block_f16_at(b);
    *coef = 0.f;
    for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(b[2 + j]);
  });
}

// ---- K-quants (256-element super-blocks)

// Q4_K (with_high = false) and Q5_K: 64-element chunk c holds sub-blocks 2c (low nibbles) and
// 2c + 1 (high nibbles); Q5_K's element l of sub-block s takes bit s of qh[l] as its fifth bit.
template <bool with_high>
float dot_q45_k(const uint8_t* w, const ActBlock256* a, int64_t nb) {
  constexpr size_t bytes = with_high ? 176 : 144;
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b, w += bytes) {
    const float d = block_f16_at(w), dmin = block_f16_at(w + 2);
    const uint8_t* scales = w + 4;
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + (with_high ? 48 : 16);
    int sumi = 0, summ = 0;
    for (int s = 0; s < 8; ++s) {
      int sc, mn;
      k4_scale_min(s, scales, &sc, &mn);
      const uint8_t* q = qs + 32 * (s / 2);
      const int8_t* qa = a[b].q + 32 * s;
      int dot = 0;
      for (int l = 0; l < 32; ++l) {
        int v = s % 2 == 0 ? q[l] & 0x0f : q[l] >> 4;
        if (with_high) v |= ((qh[l] >> s) & 1) << 4;
        dot += v * qa[l];
      }
      sumi += sc * dot;
      summ += mn * (a[b].bsum[2 * s] + a[b].bsum[2 * s + 1]);
    }
    acc += d * a[b].d * float(sumi) - dmin * a[b].d * float(summ);
  }
  return acc;
}

// Q6_K: for each 128-element half and l < 32, elements l, l + 32, l + 64, l + 96 are the low
// nibble of ql[l], of ql[l + 32], the high nibble of ql[l], of ql[l + 32], each with two bits of
// qh[l] on top, minus 32; 16 signed 8-bit scales, one per 16 elements.
float dot_q6_k(const uint8_t* w, const ActBlock256* a, int64_t nb) {
  float acc = 0.f;
  for (int64_t b = 0; b < nb; ++b, w += 210) {
    const uint8_t* ql = w;
    const uint8_t* qh = w + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float d = block_f16_at(w + 208);
    int q[256];
    for (int half = 0; half < 2; ++half) {
      const uint8_t* l8 = ql + 64 * half;
      const uint8_t* h8 = qh + 32 * half;
      int* o = q + 128 * half;
      for (int l = 0; l < 32; ++l) {
        o[l] = (l8[l] & 0x0f) | ((h8[l] & 3) << 4);
        o[l + 32] = (l8[l + 32] & 0x0f) | (((h8[l] >> 2) & 3) << 4);
        o[l + 64] = (l8[l] >> 4) | (((h8[l] >> 4) & 3) << 4);
        o[l + 96] = (l8[l + 32] >> 4) | (((h8[l] >> 6) & 3) << 4);
      }
    }
    int sumi = 0;
    for (int s = 0; s < 16; ++s) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[16 * s + l] * a[b].q[16 * s + l];
      sumi += sc[s] * (dot - 32 * a[b].bsum[s]);
    }
    acc += d * a[b].d * float(sumi);
  }
  return acc;
}

template <typename Dot>
void gemm_k(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w, size_t w_stride,
            float* y, int64_t ldy, Dot dot) {
  for (int64_t i = 0; i < m; ++i) {
    const auto* a = reinterpret_cast<const ActBlock256*>(static_cast<const uint8_t*>(x) + i * x_stride);
    for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = dot(w + j * w_stride, a, k / 256);
  }
}

void gemm_q4_k(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_k(m, n, k, x, xs, w, ws, y, ldy, dot_q45_k<false>);
}
void gemm_q5_k(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_k(m, n, k, x, xs, w, ws, y, ldy, dot_q45_k<true>);
}
void gemm_q6_k(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_k(m, n, k, x, xs, w, ws, y, ldy, dot_q6_k);
}

// ---- f16 and bf16 weights against f32 activations

template <typename ToF32>
void gemm_half(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w, size_t w_stride,
               float* y, int64_t ldy, ToF32 to_f32) {
  for (int64_t i = 0; i < m; ++i) {
    const auto* xi = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + i * x_stride);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wj = w + j * w_stride;
      float acc = 0.f;
      for (int64_t c = 0; c < k; ++c) {
        uint16_t h;
        std::memcpy(&h, wj + 2 * c, 2);
        acc += to_f32(h) * xi[c];
      }
      y[i * ldy + j] = acc;
    }
  }
}

void gemm_f16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
              int64_t ldy) {
  gemm_half(m, n, k, x, xs, w, ws, y, ldy, fp16_to_fp32);
}
void gemm_bf16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_half(m, n, k, x, xs, w, ws, y, ldy, bf16_to_fp32);
}

void gemm_f32(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w, size_t w_stride,
              float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    const auto* xi = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + i * x_stride);
    for (int64_t j = 0; j < n; ++j) {
      const auto* wj = reinterpret_cast<const float*>(w + j * w_stride);
      float acc = 0.f;
      for (int64_t c = 0; c < k; ++c) acc += wj[c] * xi[c];
      y[i * ldy + j] = acc;
    }
  }
}

// Q8_0 rows (f16 scale, 32 int8 values per block) against 16-bit activation blocks: per block the
// exact integer dot product (|Σ| ≤ 32 · 127 · 32767 < 2³¹), scaled once by d_w · d_a.
void gemm_q8_0_wide(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w,
                    size_t w_stride, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    const auto* a = reinterpret_cast<const ActBlock32W*>(static_cast<const uint8_t*>(x) + i * x_stride);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wj = w + j * w_stride;
      float acc = 0.f;
      for (int64_t b = 0; b < k / 32; ++b, wj += 34) {
        const auto* q = reinterpret_cast<const int8_t*>(wj + 2);
        int32_t s = 0;
        for (int c = 0; c < 32; ++c) s += int32_t(q[c]) * a[b].q[c];
        acc += (block_f16_at(wj) * a[b].d) * float(s);
      }
      y[i * ldy + j] = acc;
    }
  }
}

// ---- decode attention over f16 K/V rows

void dot_f16_rows(const float* q, int nq, const uint16_t* k, size_t k_stride, int64_t n, int dim, float scale,
                  float* out) {
  for (int h = 0; h < nq; ++h)
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* kj = k + j * k_stride;
      const float* qh = q + int64_t(h) * dim;
      float s = 0.f;
      for (int c = 0; c < dim; ++c) s += qh[c] * fp16_to_fp32(kj[c]);
      out[h * n + j] = s * scale;
    }
}

void axpy_f16_rows(const float* p, int nq, const uint16_t* v, size_t v_stride, int64_t n, int dim, float* out) {
  for (int h = 0; h < nq; ++h)
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t* vj = v + j * v_stride;
      for (int c = 0; c < dim; ++c) out[int64_t(h) * dim + c] += p[h * n + j] * fp16_to_fp32(vj[c]);
    }
}

// ---- prompt attention tiles (f32)

void attn_scores_tile(const float* q, size_t q_stride, int nr, const float* kt, int dim, float scale, float* s) {
  for (int r = 0; r < nr; ++r) {
    float* sr = s + r * kAttnTile;
    std::fill(sr, sr + kAttnTile, 0.f);
    for (int c = 0; c < dim; ++c) {
      const float qc = q[r * q_stride + size_t(c)];
      for (int j = 0; j < kAttnTile; ++j) sr[j] += qc * kt[c * kAttnTile + j];
    }
    for (int j = 0; j < kAttnTile; ++j) sr[j] *= scale;
  }
}

void attn_values_tile(const float* p, int nr, const float* v, int64_t n, int dim, float* o, size_t o_stride) {
  for (int r = 0; r < nr; ++r)
    for (int64_t j = 0; j < n; ++j)
      for (int c = 0; c < dim; ++c) o[r * o_stride + size_t(c)] += p[r * kAttnTile + j] * v[j * dim + c];
}

template <GgmlType t>
void dequantize(const uint8_t* w, float* y, int64_t k) {
  dequantize_row(t, w, y, k);
}

}  // namespace

const QuantKernels& quant_kernels_scalar() {
  static const QuantKernels k{"scalar",
                              quantize_act32,
                              quantize_act256,
                              quantize_act32_wide,
                              gemm_q4_0,
                              gemm_q4_1,
                              gemm_q5_0,
                              gemm_q5_1,
                              gemm_q8_0,
                              gemm_q4_k,
                              gemm_q5_k,
                              gemm_q6_k,
                              gemm_f16,
                              gemm_bf16,
                              gemm_f32,
                              gemm_q8_0_wide,
                              dot_f16_rows,
                              axpy_f16_rows,
                              attn_scores_tile,
                              attn_values_tile,
                              dequantize<GgmlType::Q4_0>,
                              dequantize<GgmlType::Q4_1>,
                              dequantize<GgmlType::Q5_0>,
                              dequantize<GgmlType::Q5_1>,
                              dequantize<GgmlType::Q8_0>,
                              dequantize<GgmlType::Q4_K>,
                              dequantize<GgmlType::Q5_K>,
                              dequantize<GgmlType::Q6_K>};
  return k;
}

}  // namespace ragkv
