// The AVX2 + FMA + F16C kernel table of quant-kernels.h. This file alone is compiled with those
// instruction sets (CMakeLists.txt); quant-kernels.cpp hands its table out only on a CPU that has
// them. It includes no header with inline functions shared with other files (their AVX2 copies
// could be linked into code that runs anywhere), only the table's declarations and intrinsics.
//
// Each weight row meets up to four activation rows at once (a 1×R register tile): the weight
// block is unpacked to 32 bytes once and multiplied with each row's 32 activation bytes by
// vpmaddubsw (unsigned weight × signed activation, pairs summed to i16) and vpmaddwd (pairs
// summed to i32, times the K-quants' sub-block scale). Legacy blocks are scaled to f32 per block,
// K-quant super-blocks once per 256 values. Every row keeps its own accumulators and runs the
// same instructions whatever R is, so a row's result never depends on its neighbours. At decode
// (one activation row) the legacy types take four weight rows at once instead (rows_legacy), each
// with the same steps.
// Worst cases stay inside i16 for vpmaddubsw: 2·31·127 (Q5), 2·63·127 (Q6_K), 2·128·127 (Q8_0
// through |w| with w's sign moved onto the activation).
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "core/backend/quant-kernels.h"

namespace ragkv {

namespace {

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Weights are read once per product, a stream from memory at decode; the hardware prefetcher
// alone left the kernels well short of the core's read rate (on the 2-core AMD EPYC of
// bench/results/README.md, 2026-11-25, "decode kernels": a streamed 49152 × 576 Q8_0 product at
// 13–14 GB/s against 18 GB/s for a loop of plain loads). Each block also asks for the bytes this far ahead of it;
// 4 KiB was the best of 0.25–8 KiB there (Q8_0 head −30 %, Q4_1 −17 %, Q5_0 −9 %). A prefetch
// never faults, so reading past the weights' end is harmless.
constexpr size_t kPrefetchBytes = 4096;

// Prefetch the cache lines of a block of `bytes` bytes at p, kPrefetchBytes ahead.
template <size_t bytes>
inline void prefetch_ahead(const uint8_t* p) {
  for (size_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + o), _MM_HINT_T0);
}

// ---- activation quantisation: the scalar table's arithmetic, eight lanes at a time

// 32 values at x rounded to q with reciprocal scale id (round to nearest even), as bytes in order.
inline void round32(const float* x, __m256 id, int8_t* q) {
  __m256i v[4];
  for (int i = 0; i < 4; ++i)
    v[i] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  // packs interleave the 128-bit lanes; the permutation restores element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

inline float abs_max(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  return hmax(m);
}

void quantize_act32(const float* x, ActBlock32* y, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    const float amax = abs_max(x, 32);
    const float d = amax / 127.f, id = amax > 0.f ? 127.f / amax : 0.f;
    round32(x, _mm256_set1_ps(id), y[b].q);
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += y[b].q[i];
    y[b].d = d;
    y[b].dsum = d * float(sum);
  }
}

// 16-bit blocks (the scalar table's quantize_act32_wide): the conversion rounds to nearest even,
// the packs saturate, and a NaN converts to INT_MIN and so packs to -32768.
void quantize_act32_wide(const float* x, ActBlock32W* y, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    const float amax = abs_max(x, 32);
    const __m256 id = _mm256_set1_ps(amax > 0.f ? 32767.f / amax : 0.f);
    for (int h = 0; h < 2; ++h) {
      const __m256i lo = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * h), id));
      const __m256i hi = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16 * h + 8), id));
      // packs interleave the 128-bit lanes; the permutation restores element order.
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].q + 16 * h),
                          _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8));
    }
    y[b].d = amax / 32767.f;
  }
}

void quantize_act256(const float* x, ActBlock256* y, int64_t k) {
  for (int64_t b = 0; b < k / 256; ++b, x += 256) {
    const float amax = abs_max(x, 256);
    const float d = amax / 127.f, id = amax > 0.f ? 127.f / amax : 0.f;
    const __m256 idv = _mm256_set1_ps(id);
    for (int c = 0; c < 8; ++c) round32(x + 32 * c, idv, y[b].q + 32 * c);
    y[b].d = d;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].q[16 * g + i];
      y[b].bsum[g] = static_cast<int16_t>(sum);
    }
  }
}

// ---- legacy 32-element blocks

inline __m256i nibbles32(const uint8_t* qs) {  // 16 bytes → elements 0..15 (low), 16..31 (high)
  // The 16 bytes in both lanes, the upper lane shifted right by four, one mask: no lane shuffle.
  const __m256i x = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(x, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(0x0f));
}

inline __m256i fifth_bits(uint32_t qh) {  // bit j of qh → 0x10 in byte j
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                          0x0303030303030303);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(qh)), shuf);
  v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
  return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Lanes 0 and 1 of the two f16 values at p (a Q4_1/Q5_1 block's scale and min), one conversion.
inline __m128 f16_pair(const uint8_t* p) { return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(u32_at(p)))); }

// Lane 0 the f16 scale at p, lane 1 that scale times `offset` (a Q4_0/Q5_0 block's coefficient).
inline __m128 f16_scale_offset(const uint8_t* p, float offset) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  const __m128 d = _mm_cvtph_ps(_mm_cvtsi32_si128(h));
  return _mm_mul_ps(_mm_moveldup_ps(d), _mm_setr_ps(1.f, offset, 0.f, 0.f));
}

// A weight block as the kernel multiplies it: u the unsigned bytes vpmaddubsw takes, and for Q8_0
// (signed weights) the signs to move onto the activation; dc holds the scale in lane 0 and the
// coefficient of the activation block's d·Σq in lane 1.
struct WeightBlock {
  __m256i u, s;
  __m128 dc;
};

struct Q4_0B {
  static constexpr size_t bytes = 18;
  static constexpr bool has_coef = true, is_signed = false, has_min = false;
  static constexpr char offset = 8;
  static WeightBlock load(const uint8_t* b) {
    return {nibbles32(b + 2), _mm256_setzero_si256(), f16_scale_offset(b, -8.f)};
  }
};
struct Q4_1B {
  static constexpr size_t bytes = 20;
  static constexpr bool has_coef = true, is_signed = false, has_min = true;
  static WeightBlock load(const uint8_t* b) { return {nibbles32(b + 4), _mm256_setzero_si256(), f16_pair(b)}; }
};
struct Q5_0B {
  static constexpr size_t bytes = 22;
  static constexpr bool has_coef = true, is_signed = false, has_min = false;
  static constexpr char offset = 16;
  static WeightBlock load(const uint8_t* b) {
    return {_mm256_or_si256(nibbles32(b + 6), fifth_bits(u32_at(b + 2))), _mm256_setzero_si256(),
            f16_scale_offset(b, -16.f)};
  }
};
struct Q5_1B {
  static constexpr size_t bytes = 24;
  static constexpr bool has_coef = true, is_signed = false, has_min = true;
  static WeightBlock load(const uint8_t* b) {
    return {_mm256_or_si256(nibbles32(b + 8), fifth_bits(u32_at(b + 4))), _mm256_setzero_si256(), f16_pair(b)};
  }
};
struct Q8_0B {
  static constexpr size_t bytes = 34;
  static constexpr bool has_coef = false, is_signed = true, has_min = false;
  static WeightBlock load(const uint8_t* b) {
    uint16_t h;
    std::memcpy(&h, b, sizeof h);
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
    return {_mm256_abs_epi8(w), w, _mm_cvtph_ps(_mm_cvtsi32_si128(h))};
  }
};

// An activation block's scale and d·Σq as lanes 0 and 1 (they are adjacent in ActBlock32).
inline __m128 act_scale_sum(const ActBlock32& ab) {
  static_assert(offsetof(ActBlock32, dsum) == offsetof(ActBlock32, d) + sizeof(float));
  return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(&ab.d)));
}

// One weight block (wb) against one activation block (its bytes av, its scale broadcast in da,
// scale and d·Σq in ds): the step every legacy kernel takes per block and row, so a row's bits do
// not depend on which kernel ran it (row_legacy for batches, rows_legacy at decode). The offset
// or min term is lane 1 of sacc, coefficient · d·Σq fused into it: a vector instruction where a
// scalar one would first need the lane extracted.
template <class B>
inline void legacy_step(const WeightBlock& wb, __m256i av, __m256 da, __m128 ds, __m256i ones, __m256& acc,
                        __m128& sacc) {
  if constexpr (B::is_signed) av = _mm256_sign_epi8(av, wb.s);
  const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(wb.u, av), ones));
  acc = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_broadcastss_ps(wb.dc)), da, acc);
  if constexpr (B::has_coef) sacc = _mm_fmadd_ps(wb.dc, ds, sacc);
}

// A row's result: the products' lanes summed, plus the offset or min term.
template <class B>
inline float legacy_result(__m256 acc, __m128 sacc) {
  const float s = hsum(acc);
  if constexpr (B::has_coef) return s + _mm_cvtss_f32(_mm_movehdup_ps(sacc));
  return s;
}

// One weight row (nb blocks) against R activation rows; y[r · ldy] for row r.
template <class B, int R>
inline void row_legacy(const uint8_t* w, const ActBlock32* const* a, int64_t nb, float* y, int64_t ldy) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[R];
  __m128 sacc[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm256_setzero_ps();
    sacc[r] = _mm_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b, w += B::bytes) {
    prefetch_ahead<B::bytes>(w);
    const WeightBlock wb = B::load(w);
    for (int r = 0; r < R; ++r) {
      const ActBlock32& ab = a[r][b];
      legacy_step<B>(wb, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.q)), _mm256_broadcast_ss(&ab.d),
                     act_scale_sum(ab), ones, acc[r], sacc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = legacy_result<B>(acc[r], sacc[r]);
}

// The driver every kernel shares: activation rows in groups of up to four, each group against
// every weight row. Row is a template taking <R> with run(w_row, act_rows, k, y, ldy).
template <template <int> class Row, typename Act>
void gemm_tiles(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w, size_t w_stride,
                float* y, int64_t ldy) {
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const int64_t r = m - i0 < 4 ? m - i0 : 4;
    const Act* a[4];
    for (int64_t i = 0; i < 4; ++i)
      a[i] = reinterpret_cast<const Act*>(static_cast<const uint8_t*>(x) + (i0 + (i < r ? i : 0)) * x_stride);
    float* yi = y + i0 * ldy;
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wj = w + j * w_stride;
      switch (r) {
        case 4: Row<4>::run(wj, a, k, yi + j, ldy); break;
        case 3: Row<3>::run(wj, a, k, yi + j, ldy); break;
        case 2: Row<2>::run(wj, a, k, yi + j, ldy); break;
        default: Row<1>::run(wj, a, k, yi + j, ldy); break;
      }
    }
  }
}

template <class B>
struct Legacy {
  template <int R>
  struct Row {
    static void run(const uint8_t* w, const ActBlock32* const* a, int64_t k, float* y, int64_t ldy) {
      row_legacy<B, R>(w, a, k / 32, y, ldy);
    }
  };
};

// W weight rows against one activation row (a decode step): the activation block is loaded and
// its scale broadcast once for all of them. Each weight row takes legacy_step as row_legacy does,
// so its output has the same bits as there (and as in a batch).
template <class B, int W>
inline void rows_legacy(const uint8_t* w, size_t ws, const ActBlock32* a, int64_t nb, float* y) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[W];
  __m128 sacc[W];
  for (int r = 0; r < W; ++r) {
    acc[r] = _mm256_setzero_ps();
    sacc[r] = _mm_setzero_ps();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const ActBlock32& ab = a[b];
    const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.q));
    const __m256 da = _mm256_broadcast_ss(&ab.d);
    const __m128 ds = act_scale_sum(ab);
    for (int r = 0; r < W; ++r) {
      const uint8_t* wb = w + r * ws + b * B::bytes;
      prefetch_ahead<B::bytes>(wb);
      legacy_step<B>(B::load(wb), av, da, ds, ones, acc[r], sacc[r]);
    }
  }
  for (int r = 0; r < W; ++r) y[r] = legacy_result<B>(acc[r], sacc[r]);
}

// Weight rows per activation row at decode (m = 1): they share each activation block's load and
// scale. Measured on weights streamed from memory (a scratch program, min of 60 products of
// 150,000 × 576 Q4_1 and 100,000 × 640 Q5_0; bench/results/README.md, 2026-11-25): without
// software prefetch two rows were 4–15 % faster than one and four slower (four streams defeated
// the hardware prefetcher); with it (prefetch_ahead), four are 2–6 % faster than two and two
// 14–17 % faster than one.
constexpr int kDecodeRows = 4;

template <class B>
void gemm_legacy(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
                 int64_t ldy) {
  if (m != 1) {
    gemm_tiles<Legacy<B>::template Row, ActBlock32>(m, n, k, x, xs, w, ws, y, ldy);
    return;
  }
  const auto* a = static_cast<const ActBlock32*>(x);
  int64_t j = 0;
  for (; j + kDecodeRows <= n; j += kDecodeRows) rows_legacy<B, kDecodeRows>(w + j * ws, ws, a, k / 32, y + j);
  for (; j < n; ++j) row_legacy<B, 1>(w + j * ws, &a, k / 32, y + j, ldy);
}

// ---- K-quants

// Q4_K/Q5_K's eight 6-bit scales and mins (packing: core/format/quant.cpp), as i16 lanes: scales
// sc[s]; mins twice each (m0, m0, m1, m1, …) to meet the activation's sixteen 16-value sums.
inline void scales_mins_k4(const uint8_t* q, int16_t* sc, __m256i* mins2) {
  alignas(32) int16_t m2[16];
  for (int j = 0; j < 8; ++j) {
    int s, m;
    if (j < 4) {
      s = q[j] & 63;
      m = q[j + 4] & 63;
    } else {
      s = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
      m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
    sc[j] = int16_t(s);
    m2[2 * j] = m2[2 * j + 1] = int16_t(m);
  }
  *mins2 = _mm256_load_si256(reinterpret_cast<const __m256i*>(m2));
}

template <bool with_high, int R>
inline void row_q45_k(const uint8_t* w, const ActBlock256* const* a, int64_t nb, float* y, int64_t ldy) {
  constexpr size_t bytes = with_high ? 176 : 144;
  const __m256i low4 = _mm256_set1_epi8(0x0f), bit0 = _mm256_set1_epi8(1);
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += bytes) {
    prefetch_ahead<bytes>(w);
    const float d = f16_at(w), dmin = f16_at(w + 2);
    int16_t sc[8];
    __m256i mins2;
    scales_mins_k4(w + 4, sc, &mins2);
    const uint8_t* qs = w + (with_high ? 48 : 16);
    __m256i qh;
    if constexpr (with_high) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(x, low4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
      if constexpr (with_high) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), bit0), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), bit0), 4));
      }
      const __m256i s_lo = _mm256_set1_epi16(sc[2 * c]), s_hi = _mm256_set1_epi16(sc[2 * c + 1]);
      for (int r = 0; r < R; ++r) {
        const int8_t* qa = a[r][b].q + 64 * c;
        const __m256i a_lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa));
        const __m256i a_hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa + 32));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), s_lo));
        isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi), s_hi));
      }
    }
    for (int r = 0; r < R; ++r) {
      const ActBlock256& ab = a[r][b];
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.bsum));
      const __m256i mm = _mm256_madd_epi16(bs, mins2);  // lane s: m_s · (Σ qa over sub-block s)
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * ab.d), acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(-dmin * ab.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = hsum(acc[r]);
}

// Q6_K's 6-bit values of one half block (128 elements) as unsigned bytes 0..63: q[t] holds
// elements 32t .. 32t + 31 of the half (low 4 bits from ql, high 2 from qh).
inline void unpack_q6_k_half(const uint8_t* w, int half, __m256i q[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0f), low2 = _mm256_set1_epi8(3);
  const uint8_t* ql = w + 64 * half;
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i hh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 128 + 32 * half));
  q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_slli_epi16(_mm256_and_si256(hh, low2), 4));
  q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 2), low2), 4));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 4), low2), 4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 6), low2), 4));
}

template <int R>
inline void row_q6_k(const uint8_t* w, const ActBlock256* const* a, int64_t nb, float* y, int64_t ldy) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += 210) {
    prefetch_ahead<210>(w);
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float d = f16_at(w + 208);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    __m256i isum[R];
    for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      unpack_q6_k_half(w, half, q);
      for (int t = 0; t < 4; ++t) {
        // q[t] holds elements 32t..32t+31 of this half: sub-blocks 8·half + 2t (i16 lanes 0-7 of
        // vpmaddubsw's pair sums) and 8·half + 2t + 1 (lanes 8-15).
        const int s = 8 * half + 2 * t;
        const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[s + 1]), _mm_set1_epi16(sc[s]));
        for (int r = 0; r < R; ++r) {
          const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[r][b].q + 128 * half + 32 * t));
          isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[t], av), scv));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const ActBlock256& ab = a[r][b];
      // The −32 offset: Σ_s sc_s · 32 · (Σ qa over sub-block s).
      const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.bsum)), sc16);
      isum[r] = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(off, 5));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_set1_ps(d * ab.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = hsum(acc[r]);
}

template <bool with_high>
struct Q45K {
  template <int R>
  struct Row {
    static void run(const uint8_t* w, const ActBlock256* const* a, int64_t k, float* y, int64_t ldy) {
      row_q45_k<with_high, R>(w, a, k / 256, y, ldy);
    }
  };
};
template <int R>
struct Q6KRow {
  static void run(const uint8_t* w, const ActBlock256* const* a, int64_t k, float* y, int64_t ldy) {
    row_q6_k<R>(w, a, k / 256, y, ldy);
  }
};

void gemm_q4_k(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_tiles<Q45K<false>::Row, ActBlock256>(m, n, k, x, xs, w, ws, y, ldy);
}
void gemm_q5_k(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_tiles<Q45K<true>::Row, ActBlock256>(m, n, k, x, xs, w, ws, y, ldy);
}
void gemm_q6_k(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_tiles<Q6KRow, ActBlock256>(m, n, k, x, xs, w, ws, y, ldy);
}

// ---- f16, bf16 and f32 weights against f32 activations

inline __m256 load8_f16(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float one_f16(const uint8_t* p) { return f16_at(p); }

// A weight element type of row_float: its size, eight values as f32 lanes, one value.
struct F16E {
  static constexpr int64_t size = 2;
  static __m256 load8(const uint8_t* p) { return load8_f16(p); }
  static float one(const uint8_t* p) { return one_f16(p); }
};
struct BF16E {
  static constexpr int64_t size = 2;
  static __m256 load8(const uint8_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  }
  static float one(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};
struct F32E {  // dequantised rows (cpu-matmul.cpp)
  static constexpr int64_t size = 4;
  static __m256 load8(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
  static float one(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};

template <class E, int R>
inline void row_float(const uint8_t* w, const float* const* x, int64_t k, float* y, int64_t ldy) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= k; c += 8) {
    if (c * E::size % 64 == 0) prefetch_ahead<1>(w + E::size * c);  // once per 64-byte line
    const __m256 wv = E::load8(w + E::size * c);
    for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x[r] + c), acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum(acc[r]);
    for (int64_t t = c; t < k; ++t) s += E::one(w + E::size * t) * x[r][t];
    y[r * ldy] = s;
  }
}

template <class E>
struct Float {
  template <int R>
  struct Row {
    static void run(const uint8_t* w, const float* const* x, int64_t k, float* y, int64_t ldy) {
      row_float<E, R>(w, x, k, y, ldy);
    }
  };
};

void gemm_f16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
              int64_t ldy) {
  gemm_tiles<Float<F16E>::Row, float>(m, n, k, x, xs, w, ws, y, ldy);
}
void gemm_bf16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
               int64_t ldy) {
  gemm_tiles<Float<BF16E>::Row, float>(m, n, k, x, xs, w, ws, y, ldy);
}
void gemm_f32(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
              int64_t ldy) {
  gemm_tiles<Float<F32E>::Row, float>(m, n, k, x, xs, w, ws, y, ldy);
}

// Q8_0 weights against 16-bit activation blocks (wide activations: the output head). The weight
// block is sign-extended to 16 bits once; per activation row vpmaddwd sums pairs and one add makes
// lanes of four products, |lane| ≤ 4 · 127 · 32767 < 2²⁴, so its conversion to f32 is exact; the
// lanes are scaled by d_w · d_a and accumulated in f32.
template <int R>
inline void row_q8_0_wide(const uint8_t* w, const ActBlock32W* const* a, int64_t k, float* y, int64_t ldy) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < k / 32; ++b, w += 34) {
    prefetch_ahead<34>(w);
    const float dw = f16_at(w);
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
    for (int r = 0; r < R; ++r) {
      const ActBlock32W& ab = a[r][b];
      const __m256i p =
          _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.q))),
                           _mm256_madd_epi16(w1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.q + 16))));
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * ab.d), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = hsum(acc[r]);
}

template <int R>
struct Q8WideRow {
  static void run(const uint8_t* w, const ActBlock32W* const* a, int64_t k, float* y, int64_t ldy) {
    row_q8_0_wide<R>(w, a, k, y, ldy);
  }
};

void gemm_q8_0_wide(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
                    int64_t ldy) {
  gemm_tiles<Q8WideRow, ActBlock32W>(m, n, k, x, xs, w, ws, y, ldy);
}

// Calls f(std::integral_constant<int, R>{}) with R = min(n, 4): the row-count dispatch of the
// attention kernels below, whose register tiles take up to four rows (or heads) at a time.
template <class F>
inline void with_rows(int n, F f) {
  switch (n) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

// ---- decode attention over f16 K/V rows

// Up to four heads at a time (H accumulators): every K/V chunk is converted once for them, and
// each head takes the FMAs, sums and tails of the one-head loop, so its bits do not depend on H.
template <int H>
void dot_f16_heads(const float* q, const uint16_t* k, size_t k_stride, int64_t n, int dim, float scale, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    const auto* kj = reinterpret_cast<const uint8_t*>(k + j * k_stride);
    __m256 acc[H];
    for (int h = 0; h < H; ++h) acc[h] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 8 <= dim; c += 8) {
      const __m256 kv = load8_f16(kj + 2 * c);
      for (int h = 0; h < H; ++h) acc[h] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * dim + c), kv, acc[h]);
    }
    for (int h = 0; h < H; ++h) {
      float s = hsum(acc[h]);
      for (int t = c; t < dim; ++t) s += q[h * dim + t] * one_f16(kj + 2 * t);
      out[h * n + j] = s * scale;
    }
  }
}

void dot_f16_rows(const float* q, int nq, const uint16_t* k, size_t k_stride, int64_t n, int dim, float scale,
                  float* out) {
  for (int h = 0; h < nq; h += 4) {
    const float* qh = q + int64_t(h) * dim;
    float* oh = out + h * n;
    with_rows(nq - h, [&](auto r) { dot_f16_heads<decltype(r)::value>(qh, k, k_stride, n, dim, scale, oh); });
  }
}

// C chunks of eight values per pass over the rows (C · 16 contiguous bytes of each V row, where
// one chunk read 16 bytes of a 64-byte line per pass); every value still accumulates over j in
// order, so the bits are those of one chunk at a time.
template <int H, int C>
inline void axpy_f16_chunks(const float* p, const uint16_t* v, size_t v_stride, int64_t n, int dim, int c,
                            float* out) {
  __m256 acc[H][C];
  for (int h = 0; h < H; ++h)
    for (int u = 0; u < C; ++u) acc[h][u] = _mm256_loadu_ps(out + h * dim + c + 8 * u);
  for (int64_t j = 0; j < n; ++j) {
    const auto* vj = reinterpret_cast<const uint8_t*>(v + j * v_stride + c);
    for (int u = 0; u < C; ++u) {
      const __m256 vv = load8_f16(vj + 16 * u);
      for (int h = 0; h < H; ++h) acc[h][u] = _mm256_fmadd_ps(_mm256_set1_ps(p[h * n + j]), vv, acc[h][u]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int u = 0; u < C; ++u) _mm256_storeu_ps(out + h * dim + c + 8 * u, acc[h][u]);
}

template <int H>
void axpy_f16_heads(const float* p, const uint16_t* v, size_t v_stride, int64_t n, int dim, float* out) {
  constexpr int kChunks = H <= 2 ? 4 : 2;  // at most 8 accumulators
  int c = 0;
  for (; c + 8 * kChunks <= dim; c += 8 * kChunks) axpy_f16_chunks<H, kChunks>(p, v, v_stride, n, dim, c, out);
  for (; c + 8 <= dim; c += 8) axpy_f16_chunks<H, 1>(p, v, v_stride, n, dim, c, out);
  for (; c < dim; ++c)
    for (int h = 0; h < H; ++h)
      for (int64_t j = 0; j < n; ++j)
        out[h * dim + c] += p[h * n + j] * one_f16(reinterpret_cast<const uint8_t*>(v + j * v_stride + c));
}

void axpy_f16_rows(const float* p, int nq, const uint16_t* v, size_t v_stride, int64_t n, int dim, float* out) {
  for (int h = 0; h < nq; h += 4) {
    const float* ph = p + h * n;
    float* oh = out + int64_t(h) * dim;
    with_rows(nq - h, [&](auto r) { axpy_f16_heads<decltype(r)::value>(ph, v, v_stride, n, dim, oh); });
  }
}

// ---- prompt attention tiles (f32)

// Pins loaded vectors to registers: without it GCC folds a vector used by several FMAs into each
// of them as a memory operand, one load per FMA, and the loads, not the FMAs, bound the loop.
inline void keep_in_register(__m256& v) { __asm__("" : "+x"(v)); }
inline void keep_in_register(__m256& a, __m256& b) { __asm__("" : "+x"(a), "+x"(b)); }

// Scores of R query rows against 16 keys of the tile at a time (2R accumulators); each score is
// one fused multiply-add chain over c from zero, then × scale.
template <int R>
void attn_scores_rows(const float* q, size_t q_stride, const float* kt, int dim, float scale, float* s) {
  const __m256 sc = _mm256_set1_ps(scale);
  for (int j0 = 0; j0 < kAttnTile; j0 += 16) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int c = 0; c < dim; ++c) {
      const float* kc = kt + c * kAttnTile + j0;
      __m256 k0 = _mm256_loadu_ps(kc), k1 = _mm256_loadu_ps(kc + 8);
      keep_in_register(k0, k1);
      for (int r = 0; r < R; ++r) {
        const __m256 qv = _mm256_broadcast_ss(q + r * q_stride + size_t(c));
        acc[r][0] = _mm256_fmadd_ps(qv, k0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(qv, k1, acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      _mm256_storeu_ps(s + r * kAttnTile + j0, _mm256_mul_ps(acc[r][0], sc));
      _mm256_storeu_ps(s + r * kAttnTile + j0 + 8, _mm256_mul_ps(acc[r][1], sc));
    }
  }
}

void attn_scores_tile(const float* q, size_t q_stride, int nr, const float* kt, int dim, float scale, float* s) {
  with_rows(nr, [&](auto r) { attn_scores_rows<decltype(r)::value>(q, q_stride, kt, dim, scale, s); });
}

// o_r += Σ_j p_rj · v_j over C chunks of eight values of R rows (R·C ≤ 8 accumulators); each value
// is one fused multiply-add chain over j in order, whatever R and C are.
template <int R, int C>
inline void attn_values_chunks(const float* p, const float* v, int64_t n, int dim, int c, float* o, size_t o_stride) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < C; ++u) acc[r][u] = _mm256_loadu_ps(o + r * o_stride + size_t(c + 8 * u));
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * dim + c;
    for (int u = 0; u < C; ++u) {
      __m256 vv = _mm256_loadu_ps(vj + 8 * u);
      keep_in_register(vv);
      for (int r = 0; r < R; ++r) acc[r][u] = _mm256_fmadd_ps(_mm256_broadcast_ss(p + r * kAttnTile + j), vv, acc[r][u]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < C; ++u) _mm256_storeu_ps(o + r * o_stride + size_t(c + 8 * u), acc[r][u]);
}

template <int R>
void attn_values_rows(const float* p, const float* v, int64_t n, int dim, float* o, size_t o_stride) {
  constexpr int kChunks = R <= 2 ? 4 : 2;
  int c = 0;
  for (; c + 8 * kChunks <= dim; c += 8 * kChunks) attn_values_chunks<R, kChunks>(p, v, n, dim, c, o, o_stride);
  for (; c + 8 <= dim; c += 8) attn_values_chunks<R, 1>(p, v, n, dim, c, o, o_stride);
  for (; c < dim; ++c)
    for (int r = 0; r < R; ++r)
      for (int64_t j = 0; j < n; ++j) o[r * o_stride + size_t(c)] += p[r * kAttnTile + j] * v[j * dim + c];
}

void attn_values_tile(const float* p, int nr, const float* v, int64_t n, int dim, float* o, size_t o_stride) {
  with_rows(nr, [&](auto r) { attn_values_rows<decltype(r)::value>(p, v, n, dim, o, o_stride); });
}

// ---- dequantisation

// 32 bytes v as f32 lanes, eight at a time: y[8g .. 8g + 7] = f(g, values), with the bytes read as
// signed or unsigned integers (exact in f32).
template <bool is_signed, class F>
inline void bytes_to_f32(__m256i v, F f) {
  alignas(32) uint8_t b[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), v);
  for (int g = 0; g < 4; ++g) {
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * g));
    f(g, _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(x) : _mm256_cvtepu8_epi32(x)));
  }
}

// Legacy blocks to f32 (layouts: core/format/quant.cpp): the block's integers as WeightBlock::load
// unpacks them, then x · d (Q4_0, Q5_0 with the offset subtracted first, Q8_0) or fma(x, d, m)
// (Q4_1, Q5_1) — core/format/quant.cpp's operations, so the values are the same bits.
template <class B>
void dequantize_legacy(const uint8_t* w, float* y, int64_t k) {
  for (int64_t b = 0; b < k / 32; ++b, w += B::bytes, y += 32) {
    const WeightBlock wb = B::load(w);
    const __m256 d = _mm256_broadcastss_ps(wb.dc);
    if constexpr (B::is_signed) {  // Q8_0: the signed bytes as they are
      bytes_to_f32<true>(wb.s, [&](int g, __m256 x) { _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(x, d)); });
    } else if constexpr (B::has_min) {  // Q4_1, Q5_1: lane 1 of dc is the min
      const __m256 m = _mm256_broadcastss_ps(_mm_movehdup_ps(wb.dc));
      bytes_to_f32<false>(wb.u, [&](int g, __m256 x) { _mm256_storeu_ps(y + 8 * g, _mm256_fmadd_ps(x, d, m)); });
    } else {  // Q4_0, Q5_0: the unsigned values less the offset, as signed bytes
      const __m256i x = _mm256_sub_epi8(wb.u, _mm256_set1_epi8(B::offset));
      bytes_to_f32<true>(x, [&](int g, __m256 v) { _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(v, d)); });
    }
  }
}

// Q4_K/Q5_K super-blocks to f32: each 64-value chunk's low and high nibbles (and Q5_K's fifth
// bits) as row_q45_k unpacks them, then fma(d · sc, q, −(dmin · m)) per sub-block — the scalar
// dequantiser's products and fused multiply-add.
template <bool with_high>
void dequantize_q45_k(const uint8_t* w, float* y, int64_t k) {
  constexpr size_t bytes = with_high ? 176 : 144;
  const __m256i low4 = _mm256_set1_epi8(0x0f), bit0 = _mm256_set1_epi8(1);
  for (int64_t b = 0; b < k / 256; ++b, w += bytes) {
    const float d = f16_at(w), dmin = f16_at(w + 2);
    int16_t sc[8];
    __m256i mins2;
    scales_mins_k4(w + 4, sc, &mins2);
    alignas(32) int16_t m2[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(m2), mins2);
    const uint8_t* qs = w + (with_high ? 48 : 16);
    __m256i qh;
    if constexpr (with_high) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
    for (int c = 0; c < 4; ++c, y += 64) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i q[2] = {_mm256_and_si256(x, low4), _mm256_and_si256(_mm256_srli_epi16(x, 4), low4)};
      if constexpr (with_high) {
        q[0] = _mm256_or_si256(q[0], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), bit0), 4));
        q[1] = _mm256_or_si256(q[1], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), bit0), 4));
      }
      for (int h = 0; h < 2; ++h) {
        const int s = 2 * c + h;
        const __m256 ds = _mm256_set1_ps(d * float(sc[s])), dm = _mm256_set1_ps(-(dmin * float(m2[2 * s])));
        float* yh = y + 32 * h;
        bytes_to_f32<false>(q[h], [&](int g, __m256 v) { _mm256_storeu_ps(yh + 8 * g, _mm256_fmadd_ps(ds, v, dm)); });
      }
    }
  }
}

// Q6_K super-blocks to f32 (layout: core/format/quant.cpp): the 6-bit values unpacked as row_q6_k does,
// 32 at a time, then (d · scale) · (q − 32) in f32 — the scalar dequantiser's two products, so
// the values are the same bits.
void dequantize_q6_k(const uint8_t* w, float* y, int64_t k) {
  const __m256i off = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < k / 256; ++b, w += 210) {
    const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float d = f16_at(w + 208);
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      unpack_q6_k_half(w, half, q);
      for (int t = 0; t < 4; ++t) {
        // elements 32t .. 32t + 31 of this half: sub-blocks 8·half + 2t (first 16) and + 1
        alignas(32) int8_t v[32];
        _mm256_store_si256(reinterpret_cast<__m256i*>(v), _mm256_sub_epi8(q[t], off));
        float* yt = y + 256 * b + 128 * half + 32 * t;
        for (int g = 0; g < 4; ++g) {
          const __m256 ds = _mm256_set1_ps(d * float(sc[8 * half + 2 * t + g / 2]));
          const __m256 qv = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + 8 * g))));
          _mm256_storeu_ps(yt + 8 * g, _mm256_mul_ps(ds, qv));
        }
      }
    }
  }
}

}  // namespace

extern const QuantKernels kQuantKernelsAvx2;
const QuantKernels kQuantKernelsAvx2{"avx2",
                                     quantize_act32,
                                     quantize_act256,
                                     quantize_act32_wide,
                                     gemm_legacy<Q4_0B>,
                                     gemm_legacy<Q4_1B>,
                                     gemm_legacy<Q5_0B>,
                                     gemm_legacy<Q5_1B>,
                                     gemm_legacy<Q8_0B>,
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
                                     dequantize_legacy<Q4_0B>,
                                     dequantize_legacy<Q4_1B>,
                                     dequantize_legacy<Q5_0B>,
                                     dequantize_legacy<Q5_1B>,
                                     dequantize_legacy<Q8_0B>,
                                     dequantize_q45_k<false>,
                                     dequantize_q45_k<true>,
                                     dequantize_q6_k};

}  // namespace ragkv

#endif  // x86
