// The prompt kernels of quant-kernels.h on AVX-512 VNNI: K-quant weights (Q4_K, Q5_K, Q6_K)
// against a prompt's activation rows by integer dot products. This file alone is compiled with
// AVX-512 F/BW/VL/VNNI (CMakeLists.txt); quant-kernels.cpp hands its tables out only on a CPU that
// has them. Like quant-kernels-avx2.cpp it includes no header with inline functions shared with
// other files.
//
// A prompt meets every weight row many times, so the weights are repacked on the fly, once per
// call, for all of its activation rows: sixteen weight rows at a time are unpacked and
// interleaved so that each 32-bit lane u of a 512-bit vector holds consecutive values of row u,
// with the super-block's scales as vectors with a lane per row. One instruction then multiplies
// those values of sixteen rows by activation values broadcast to every lane, and each activation
// row's result for the sixteen rows comes out as the lanes of one vector — the layout of
// llama.cpp's repacked CPU kernels and ik_llama.cpp's, here built per call in a thread-local
// buffer from the weights as the file has them. A lane's operations depend only on its weight row
// and its activation row, so an output has the same bits whatever rows share the call.
//
// Q4_K weights, most of a Q4_K_M file, may instead be repacked once at load (Q4KRows16: the CPU
// backend does so for the layers' matrices and releases the file's pages). Decode steps then run
// on sixteen rows per instruction without unpacking any scales per row (an 8B-shaped decode
// spent most of its time in that unpacking), and prompts build their 16-bit groups from the
// repacked nibbles, with the bits they would have from the file's rows.
//
// Two tables:
// - 16-bit activations (the default): blocks of 32 values (ActBlock32W, then each block's sum),
//   weights as int16 with the sub-block scale inside (sc · q; Q6_K sc · (q − 32)); vpdpwssd, two
//   products per lane; each sub-block's integer sum scaled in f32 by d · a.d, Q4_K/Q5_K's mins
//   subtracted as dmin · m · a.d · Σ a. Within 16-bit rounding of the f32 product.
// - 8-bit activations: ActBlock256 (llama.cpp's Q8_K precision), weights as bytes; vpdpbusd, four
//   products per lane; per super-block the portable kernels' integers exactly
//   (quant-kernels-scalar.cpp): sumi = Σ_s sc_s · Σ_{v∈s} q_v · a_v and the offset term
//   summ = Σ_s m_s · (Σ a over s) (Q6_K: −32 · Σ_s sc_s · Σ a, inside sumi), then
//   y += (d · a.d) · sumi − (dmin · a.d) · summ in fused multiply-adds.
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/backend/quant-kernels.h"

namespace ragkv {

namespace {

constexpr int kLanes = 16;  // weight rows per repacked group: one per 32-bit lane of a zmm
constexpr int kRowTile = 8;  // activation rows in registers at once (3 zmm each)

// int32 lanes to f32 (the unmasked intrinsic starts from an undefined vector, which GCC 12 warns of).
inline __m512 to_f32(__m512i v) { return _mm512_maskz_cvtepi32_ps(0xffff, v); }

// The weights' cache lines a block of `bytes` bytes at p spans, 4 KiB ahead (the decode kernels'
// stream; quant-kernels-avx2.cpp measured the distance).
template <size_t bytes>
inline void prefetch_ahead(const uint8_t* p) {
  for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + 4096 + o), _MM_HINT_T0);
}

// Calls f(std::integral_constant<int, R>{}) with R = min(n, N): the row-count dispatch of the
// register-tiled kernels below.
template <int N, class F>
inline void with_rows(int n, F f) {
  if constexpr (N > 1) {
    if (n >= N) return f(std::integral_constant<int, N>{});
    with_rows<N - 1>(n, f);
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// The sum of the lanes, in a fixed order.
inline float hsum(__m256 h) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

inline float hsum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  return hsum(_mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8)));
}

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

// ---- 8-bit activations (RAGKV_PREFILL_KERNELS=int8); the unpackers serve both tables

// One super-block of sixteen weight rows, repacked for 8-bit activations.
// - vals[t]: lane u = values 4t … 4t + 3 of row u (bytes, 0 … 63);
// - sc[s]: lane u = the scale of sub-block s of row u (32 values for Q4_K/Q5_K, 16 for Q6_K);
// - off[p]: lane u = two int16 coefficients of the offset term over the activation's 16-value
//   sums 2p and 2p + 1 (Q4_K/Q5_K: m_p, m_p; Q6_K: −32 · sc_2p, −32 · sc_2p+1);
// - d, dmin: lane u = row u's super-block scales (Q6_K: dmin unused).
struct Packed {
  __m512i vals[64];
  __m512i sc[16];
  __m512i off[8];
  __m512 d, dmin;
};

// Row u's 256 values and scales unpacked (the block layouts of core/format/quant.cpp).
struct Unpacked {
  alignas(64) uint8_t v[kLanes][256];
  int32_t sc[16][kLanes];
  int16_t off[8][kLanes][2];
  float d[kLanes], dmin[kLanes];
};

inline void scale_min_k4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <bool with_high>
void unpack_q45_k(const uint8_t* w, int u, Unpacked& o) {
  o.d[u] = f16_at(w);
  o.dmin[u] = f16_at(w + 2);
  for (int s = 0; s < 8; ++s) {
    int sc, m;
    scale_min_k4(s, w + 4, &sc, &m);
    o.sc[s][u] = sc;
    o.off[s][u][0] = o.off[s][u][1] = int16_t(m);
  }
  const uint8_t* qs = w + (with_high ? 48 : 16);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  for (int c = 0; c < 4; ++c) {  // 64-value chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
    __m256i lo = _mm256_and_si256(x, low4), hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
    if constexpr (with_high) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
      const __m256i bit0 = _mm256_set1_epi8(1);
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), bit0), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), bit0), 4));
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(o.v[u] + 64 * c), lo);
    _mm256_store_si256(reinterpret_cast<__m256i*>(o.v[u] + 64 * c + 32), hi);
  }
}

// Q6_K's 6-bit values of one half block (128 elements) as bytes 0 … 63: q[t] holds elements
// 32t … 32t + 31 of the half (the layout of core/format/quant.cpp; quant-kernels-avx2.cpp has its
// own copy, compiled for AVX2 alone).
inline void q6_k_half(const uint8_t* w, int half, __m256i q[4]) {
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

void unpack_q6_k(const uint8_t* w, int u, Unpacked& o) {
  const auto* sc = reinterpret_cast<const int8_t*>(w + 192);
  o.d[u] = f16_at(w + 208);
  o.dmin[u] = 0.f;
  for (int s = 0; s < 16; ++s) o.sc[s][u] = sc[s];
  for (int p = 0; p < 8; ++p) {
    o.off[p][u][0] = int16_t(-32 * sc[2 * p]);
    o.off[p][u][1] = int16_t(-32 * sc[2 * p + 1]);
  }
  for (int half = 0; half < 2; ++half) {
    __m256i q[4];
    q6_k_half(w, half, q);
    for (int t = 0; t < 4; ++t) _mm256_store_si256(reinterpret_cast<__m256i*>(o.v[u] + 128 * half + 32 * t), q[t]);
  }
}

// 16 × 16 words transposed: out[c] lane u = in[u] lane c (unpack 32-bit, unpack 64-bit, then two
// rounds of 128-bit lane shuffles; the masked forms, full masks: the unmasked ones start from an
// undefined vector, which GCC 12 warns of).
inline void transpose16(__m512i r[16], __m512i* out) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_maskz_unpacklo_epi32(0xffff, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_maskz_unpackhi_epi32(0xffff, r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // r[4i + j], 128-bit lane L: rows 4i … 4i + 3 of column 4L + j
    r[4 * i] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_maskz_unpacklo_epi64(0xff, t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_maskz_unpackhi_epi64(0xff, t[4 * i + 1], t[4 * i + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    t[j] = _mm512_maskz_shuffle_i32x4(0xffff, r[j], r[4 + j], 0x88);
    t[4 + j] = _mm512_maskz_shuffle_i32x4(0xffff, r[j], r[4 + j], 0xdd);
    t[8 + j] = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + j], r[12 + j], 0x88);
    t[12 + j] = _mm512_maskz_shuffle_i32x4(0xffff, r[8 + j], r[12 + j], 0xdd);
  }
  for (int j = 0; j < 4; ++j) {
    out[j] = _mm512_maskz_shuffle_i32x4(0xffff, t[j], t[8 + j], 0x88);
    out[8 + j] = _mm512_maskz_shuffle_i32x4(0xffff, t[j], t[8 + j], 0xdd);
    out[4 + j] = _mm512_maskz_shuffle_i32x4(0xffff, t[4 + j], t[12 + j], 0x88);
    out[12 + j] = _mm512_maskz_shuffle_i32x4(0xffff, t[4 + j], t[12 + j], 0xdd);
  }
}

// The unpacked rows interleaved into lanes: vals[t] lane u = the 32-bit word t of row u (rows
// beyond the weight's end are zero).
void interleave(const Unpacked& o, int nsub, Packed& p) {
  for (int blk = 0; blk < 4; ++blk) {  // words 16 · blk … 16 · blk + 15 of every row
    __m512i r[16];
    for (int u = 0; u < kLanes; ++u) r[u] = _mm512_load_si512(o.v[u] + 64 * blk);
    transpose16(r, p.vals + 16 * blk);
  }
  for (int s = 0; s < nsub; ++s) p.sc[s] = _mm512_loadu_si512(o.sc[s]);
  for (int q = 0; q < 8; ++q) p.off[q] = _mm512_loadu_si512(o.off[q]);
  p.d = _mm512_loadu_ps(o.d);
  p.dmin = _mm512_loadu_ps(o.dmin);
}

enum class KType { q4_k, q5_k, q6_k };

template <KType T>
struct KTraits;
template <>
struct KTraits<KType::q4_k> {
  static constexpr size_t bytes = 144;
  static constexpr int nsub = 8;  // sub-blocks of 32 values: 8 words
  static void unpack(const uint8_t* w, int u, Unpacked& o) { unpack_q45_k<false>(w, u, o); }
};
template <>
struct KTraits<KType::q5_k> {
  static constexpr size_t bytes = 176;
  static constexpr int nsub = 8;
  static void unpack(const uint8_t* w, int u, Unpacked& o) { unpack_q45_k<true>(w, u, o); }
};
template <>
struct KTraits<KType::q6_k> {
  static constexpr size_t bytes = 210;
  static constexpr int nsub = 16;  // sub-blocks of 16 values: 4 words
  static void unpack(const uint8_t* w, int u, Unpacked& o) { unpack_q6_k(w, u, o); }
};

// R activation rows (a[r], nb super-blocks each) against one repacked group of sixteen weight
// rows: out[r][u] = the product of activation row r with weight row u.
template <KType T, int R>
void rows_against_group(const Packed* pk, const uint8_t* const* rows, int64_t nb, float (*out)[kLanes]) {
  const ActBlock256* a[R];
  for (int r = 0; r < R; ++r) a[r] = reinterpret_cast<const ActBlock256*>(rows[r]);
  constexpr int nsub = KTraits<T>::nsub, words = 64 / nsub;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Packed& p = pk[b];
    __m512i sumi[R], part[R];
    for (int r = 0; r < R; ++r) sumi[r] = _mm512_setzero_si512();
    for (int s = 0; s < nsub; ++s) {
      for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
      for (int t = 0; t < words; ++t) {
        const __m512i wv = p.vals[s * words + t];
        for (int r = 0; r < R; ++r) {
          int32_t a4;
          std::memcpy(&a4, a[r][b].q + 4 * (s * words + t), 4);
          part[r] = _mm512_dpbusd_epi32(part[r], wv, _mm512_set1_epi32(a4));
        }
      }
      for (int r = 0; r < R; ++r) sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(part[r], p.sc[s]));
    }
    // The offset term over the activation's sixteen 16-value sums (part is free again).
    for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
    for (int q = 0; q < 8; ++q)
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, a[r][b].bsum + 2 * q, 4);
        part[r] = _mm512_dpwssd_epi32(part[r], p.off[q], _mm512_set1_epi32(pair));
      }
    for (int r = 0; r < R; ++r) {
      const __m512 ad = _mm512_set1_ps(a[r][b].d);
      if constexpr (T == KType::q6_k) {
        // Q6_K: the offset belongs to the integer sum (the portable kernel's sc · (dot − 32 · bsum)).
        acc[r] = _mm512_fmadd_ps(to_f32(_mm512_add_epi32(sumi[r], part[r])), _mm512_mul_ps(p.d, ad), acc[r]);
      } else {
        acc[r] = _mm512_fmadd_ps(to_f32(sumi[r]), _mm512_mul_ps(p.d, ad), acc[r]);
        acc[r] = _mm512_fnmadd_ps(to_f32(part[r]), _mm512_mul_ps(p.dmin, ad), acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

// The prompt products' driver, for either table: for each group of sixteen weight rows, every
// super-block repacked once (repack(j0, rows, b, packed[b]), rows past the weight's end zero),
// then the activation rows kRowTile at a time against it (rows(R, packed, a, out)).
template <class PackedT, class Repack, class Rows>
void gemm_repacked(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, float* y, int64_t ldy, Repack repack,
                   Rows rows_fn) {
  const int64_t nb = k / 256;
  thread_local std::vector<PackedT> packed;
  if (packed.size() < size_t(nb)) packed.resize(size_t(nb));
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    const int rows = int(n - j0 < kLanes ? n - j0 : kLanes);
    for (int64_t b = 0; b < nb; ++b) repack(j0, rows, b, packed[size_t(b)]);
    for (int64_t i0 = 0; i0 < m; i0 += kRowTile) {
      const int r = int(m - i0 < kRowTile ? m - i0 : kRowTile);
      const uint8_t* a[kRowTile];
      for (int i = 0; i < kRowTile; ++i) a[i] = static_cast<const uint8_t*>(x) + (i0 + (i < r ? i : 0)) * xs;
      float out[kRowTile][kLanes];
      with_rows<kRowTile>(r, [&](auto R) { rows_fn(R, packed.data(), a, out); });
      for (int i = 0; i < r; ++i) std::memcpy(y + (i0 + i) * ldy + j0, out[i], size_t(rows) * sizeof(float));
    }
  }
}

template <KType T>
void gemm_k_prompt(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
                   int64_t ldy) {
  using Tr = KTraits<T>;
  thread_local std::vector<Unpacked> unpacked(1);
  Unpacked& un = unpacked[0];
  gemm_repacked<Packed>(
      m, n, k, x, xs, y, ldy,
      [&](int64_t j0, int rows, int64_t b, Packed& p) {
        if (rows < kLanes) std::memset(&un, 0, sizeof un);
        for (int u = 0; u < rows; ++u) Tr::unpack(w + (j0 + u) * ws + b * Tr::bytes, u, un);
        interleave(un, Tr::nsub, p);
      },
      [&](auto R, const Packed* pk, const uint8_t* const* a, float (*out)[kLanes]) {
        rows_against_group<T, decltype(R)::value>(pk, a, k / 256, out);
      });
}

// ---- 16-bit activations (the default): ActBlock32W blocks, then each block's sum

// A prompt activation row of k values: k / 32 ActBlock32W blocks, then k / 32 int32 block sums
// (Σ q over the block, for the K-quants' mins).
size_t act16_row_bytes(int64_t k) { return size_t(k / 32) * (sizeof(ActBlock32W) + sizeof(int32_t)); }

// max |x| over 32 values (eight lanes at a time; max is exact, so any order gives the same value).
inline float abs_max32(const float* x) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
  for (int i = 8; i < 32; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

void quantize_act16(const float* x, uint8_t* row, int64_t k) {
  auto* blocks = reinterpret_cast<ActBlock32W*>(row);
  auto* sums = reinterpret_cast<int32_t*>(row + size_t(k / 32) * sizeof(ActBlock32W));
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = abs_max32(x);
    const __m512 id = _mm512_set1_ps(amax > 0.f ? 32767.f / amax : 0.f);
    // Round to nearest even and saturate, as the portable table's quantize_act32_wide (a NaN packs
    // to −32768 there, as INT_MIN saturates here). The masked forms: the unmasked ones start from
    // an undefined vector, which GCC 12 warns of.
    const __m512i q0 = _mm512_maskz_cvtps_epi32(0xffff, _mm512_mul_ps(v0, id));
    const __m512i q1 = _mm512_maskz_cvtps_epi32(0xffff, _mm512_mul_ps(v1, id));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].q), _mm512_maskz_cvtsepi32_epi16(0xffff, q0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(blocks[b].q + 16), _mm512_maskz_cvtsepi32_epi16(0xffff, q1));
    blocks[b].d = amax / 32767.f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) sum += blocks[b].q[i];
    sums[b] = sum;
  }
}

// One super-block of sixteen weight rows for 16-bit activations.
// - w[t]: lane u = values 2t and 2t + 1 of row u as int16 with the sub-block scale inside:
//   Q4_K/Q5_K sc_s · q (at most 31 · 63), Q6_K sc_s · (q − 32) (at most 128 · 32 in magnitude);
// - d: lane u = row u's d; mins[c] (Q4_K/Q5_K): lane u = dmin · m_c of row u.
// A sub-block's integer sum stays inside int32: 32 · 1953 · 32768 (Q5_K), 16 · 4096 · 32767 (Q6_K).
struct Packed16 {
  __m512i w[128];
  __m512 d;
  __m512 mins[8];
};

struct Unpacked16 {
  alignas(64) int16_t v[kLanes][256];
  float d[kLanes], mins[8][kLanes];
};

template <KType T>
void unpack16(const uint8_t* w, int u, Unpacked& tmp, Unpacked16& o) {
  KTraits<T>::unpack(w, u, tmp);
  o.d[u] = tmp.d[u];
  // 32 values at a time as int16, times their scale (Q6_K: two 16-value sub-blocks, less 32).
  for (int g = 0; g < 8; ++g) {
    __m512i q = _mm512_cvtepu8_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(tmp.v[u] + 32 * g)));
    __m512i scv;
    if constexpr (T == KType::q6_k) {
      q = _mm512_sub_epi16(q, _mm512_set1_epi16(32));
      scv = _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(int16_t(tmp.sc[2 * g][u])),
                                    _mm512_set1_epi16(int16_t(tmp.sc[2 * g + 1][u])));
    } else {
      scv = _mm512_set1_epi16(int16_t(tmp.sc[g][u]));
      o.mins[g][u] = tmp.dmin[u] * float(tmp.off[g][u][0]);
    }
    _mm512_store_si512(o.v[u] + 32 * g, _mm512_mullo_epi16(q, scv));
  }
}

void interleave16(const Unpacked16& o, Packed16& p) {
  for (int blk = 0; blk < 8; ++blk) {  // words 16 · blk … 16 · blk + 15 of every row
    __m512i r[16];
    for (int u = 0; u < kLanes; ++u) r[u] = _mm512_load_si512(o.v[u] + 32 * blk);
    transpose16(r, p.w + 16 * blk);
  }
  p.d = _mm512_loadu_ps(o.d);
  for (int c = 0; c < 8; ++c) p.mins[c] = _mm512_loadu_ps(o.mins[c]);
}

// R activation rows against one repacked group: per 32-value activation block c, the integer sums
// of its sub-blocks (one for Q4_K/Q5_K, two of 16 values for Q6_K) are scaled in f32 by d · a.d,
// and Q4_K/Q5_K's mins subtract dmin · m_c · a.d · Σ q.
template <KType T, int R>
void rows_against_group16(const Packed16* pk, const uint8_t* const* a, int64_t nb, float (*out)[kLanes]) {
  constexpr int per_sub = T == KType::q6_k ? 8 : 16;  // words (int16 pairs) per integer sum
  const int64_t nblk = nb * 8;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Packed16& p = pk[b];
    for (int c = 0; c < 8; ++c) {  // activation block 8b + c: values 32c … 32c + 31 of the super-block
      __m512 scale[R];
      for (int r = 0; r < R; ++r)
        scale[r] = _mm512_mul_ps(p.d, _mm512_set1_ps(reinterpret_cast<const ActBlock32W*>(a[r])[8 * b + c].d));
      for (int h = 0; h < 16 / per_sub; ++h) {
        __m512i part[R];
        for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
        for (int t = 0; t < per_sub; ++t) {
          const int word = 16 * c + per_sub * h + t;
          const __m512i wv = p.w[word];
          for (int r = 0; r < R; ++r) {
            int32_t pair;
            std::memcpy(&pair, reinterpret_cast<const ActBlock32W*>(a[r])[8 * b + c].q + 2 * (per_sub * h + t), 4);
            part[r] = _mm512_dpwssd_epi32(part[r], wv, _mm512_set1_epi32(pair));
          }
        }
        for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(to_f32(part[r]), scale[r], acc[r]);
      }
      if constexpr (T != KType::q6_k)
        for (int r = 0; r < R; ++r) {
          const auto* sums = reinterpret_cast<const int32_t*>(a[r] + size_t(nblk) * sizeof(ActBlock32W));
          const float ad = reinterpret_cast<const ActBlock32W*>(a[r])[8 * b + c].d;
          acc[r] = _mm512_fnmadd_ps(p.mins[c], _mm512_set1_ps(ad * float(sums[8 * b + c])), acc[r]);
        }
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

template <KType T>
void gemm_k_prompt16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
                     int64_t ldy) {
  thread_local std::vector<Unpacked> unpacked(1);
  thread_local std::vector<Unpacked16> unpacked16(1);
  Unpacked& tmp = unpacked[0];
  Unpacked16& un = unpacked16[0];
  gemm_repacked<Packed16>(
      m, n, k, x, xs, y, ldy,
      [&](int64_t j0, int rows, int64_t b, Packed16& p) {
        if (rows < kLanes) std::memset(&un, 0, sizeof un);
        for (int u = 0; u < rows; ++u) unpack16<T>(w + (j0 + u) * ws + b * KTraits<T>::bytes, u, tmp, un);
        interleave16(un, p);
      },
      [&](auto R, const Packed16* pk, const uint8_t* const* a, float (*out)[kLanes]) {
        rows_against_group16<T, decltype(R)::value>(pk, a, k / 256, out);
      });
}

// ---- Q6_K weights against 16-bit activation blocks, row by row (the output head at decode)

// One weight row against R activation rows of ActBlock32W blocks: each 32 values of the row
// become int16 q − 32, one vpdpwssd per activation row gives the integer sums of its two 16-value
// sub-blocks (lanes 0-7 and 8-15; 16 · 64 · 32767 < 2³¹ per lane), scaled in f32 by the sub-block's
// d · sc (a lane-wise vector) and a.d — the scales multiply in f32, not in the weights' int16.
template <int R>
void row_q6_k_wide(const uint8_t* w, const ActBlock32W* const* a, int64_t nb, float* y, int64_t ldy) {
  const __m512i off = _mm512_set1_epi16(32);
  // vpermps indices: lanes 0-7 take sub-block 2g's scale, lanes 8-15 sub-block 2g + 1's.
  const __m512i halves = _mm512_mask_blend_epi32(0xff00, _mm512_setzero_si512(), _mm512_set1_epi32(1));
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += 210) {
    prefetch_ahead<210>(w);
    // d · sc_s in lane s.
    const __m512 dsc = _mm512_mul_ps(
        _mm512_set1_ps(f16_at(w + 208)),
        to_f32(_mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 192)))));
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      q6_k_half(w, half, q);
      for (int t = 0; t < 4; ++t) {
        const int g = 4 * half + t;  // values 32g … 32g + 31: sub-blocks 2g (lanes 0-7) and 2g + 1
        const __m512i pick = _mm512_add_epi32(halves, _mm512_set1_epi32(2 * g));
        const __m512 scale = _mm512_maskz_permutexvar_ps(0xffff, pick, dsc);
        const __m512i wv = _mm512_sub_epi16(_mm512_cvtepu8_epi16(q[t]), off);
        for (int r = 0; r < R; ++r) {
          const ActBlock32W& ab = a[r][8 * b + g];
          const __m512i sum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), wv, _mm512_loadu_si512(ab.q));
          acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(to_f32(sum), _mm512_set1_ps(ab.d)), scale, acc[r]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = hsum(acc[r]);
}

void gemm_q6_k_wide(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws, float* y,
                    int64_t ldy) {
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const int64_t r = m - i0 < 4 ? m - i0 : 4;
    const ActBlock32W* a[4];
    for (int64_t i = 0; i < 4; ++i)
      a[i] = reinterpret_cast<const ActBlock32W*>(static_cast<const uint8_t*>(x) + (i0 + (i < r ? i : 0)) * xs);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wj = w + j * ws;
      float* yj = y + i0 * ldy + j;
      with_rows<4>(int(r), [&](auto R) { row_q6_k_wide<decltype(R)::value>(wj, a, k / 256, yj, ldy); });
    }
  }
}

// ---- Q4_K weights against 8-bit activation blocks, row by row (decode steps)

// A Q4_K super-block's eight 6-bit scales and mins (core/format/quant.cpp's packing) as bytes:
// sc[0 … 7], then m[0 … 7] (the word shuffle of llama.cpp's AVX2 kernel, in our own words).
inline __m128i q4_k_scales_mins(const uint8_t* q) {
  uint32_t u[4];
  std::memcpy(u, q, 12);
  constexpr uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
  u[3] = ((u[2] >> 4) & low4) | (((u[1] >> 6) & low2) << 4);  // m[4 … 7]
  const uint32_t m0 = u[1] & low6;                            // m[0 … 3]
  u[1] = (u[2] & low4) | (((u[0] >> 6) & low2) << 4);          // sc[4 … 7]
  u[2] = m0;
  u[0] &= low6;                                                // sc[0 … 3]
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
}

// The activation's 256 bytes of a super-block in the order the weight's nibbles come out of two
// 64-byte loads: sub-blocks 0, 2, 1, 3, 4, 6, 5, 7 (low nibbles of chunks 0 and 1, their high
// nibbles, then chunks 2 and 3).
inline void permute_for_q4_k(const int8_t* q, int8_t* out) {
  constexpr int order[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int i = 0; i < 8; ++i) std::memcpy(out + 32 * i, q + 32 * order[i], 32);
}

// One Q4_K weight row against R activation rows (each super-block's q already permuted): per
// 64-value vector, vpmaddubsw (pairs to i16) and vpdpwssd with the two sub-blocks' scales (to
// i32); per super-block the mins against the activation's 16-value sums, then f32 as the AVX2
// kernel: y += d · a.d · sumi − dmin · a.d · summ.
template <int R>
void row_q4_k_decode(const uint8_t* w, const ActBlock256* const* a, const int8_t* const* aq, int64_t nb, float* y,
                     int64_t ldy) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  // vpermw indices: lanes 0-15 take scale i, lanes 16-31 scale j, for the four vectors' sub-blocks.
  const __m512i pick[4] = {_mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(0), _mm512_set1_epi16(2)),
                           _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(1), _mm512_set1_epi16(3)),
                           _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(4), _mm512_set1_epi16(6)),
                           _mm512_mask_blend_epi16(0xffff0000u, _mm512_set1_epi16(5), _mm512_set1_epi16(7))};
  __m512 acc[R];  // d · a.d · sumi, lane by lane
  __m256 accm[R];  // − dmin · a.d · summ
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b, w += 144) {
    prefetch_ahead<144>(w);
    const float d = f16_at(w), dmin = f16_at(w + 2);
    const __m128i sm = q4_k_scales_mins(w + 4);
    const __m512i sc16 = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(sm));  // lanes 0-7: sc, 8-15: m
    const __m512i x0 = _mm512_loadu_si512(w + 16), x1 = _mm512_loadu_si512(w + 80);
    const __m512i q[4] = {_mm512_and_si512(x0, low4), _mm512_and_si512(_mm512_srli_epi16(x0, 4), low4),
                          _mm512_and_si512(x1, low4), _mm512_and_si512(_mm512_srli_epi16(x1, 4), low4)};
    __m512i scv[4];
    for (int v = 0; v < 4; ++v) scv[v] = _mm512_permutexvar_epi16(pick[v], sc16);
    // mins twice each (m0, m0, m1, m1, …) against the sixteen 16-value sums.
    const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_srli_si128(sm, 8), _mm_srli_si128(sm, 8)));
    for (int r = 0; r < R; ++r) {
      const int8_t* qa = aq[r] + 256 * b;
      __m512i isum = _mm512_setzero_si512();
      for (int v = 0; v < 4; ++v)
        isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(q[v], _mm512_loadu_si512(qa + 64 * v)), scv[v]);
      const ActBlock256& ab = a[r][b];
      const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab.bsum)), mins2);
      acc[r] = _mm512_fmadd_ps(to_f32(isum), _mm512_set1_ps(d * ab.d), acc[r]);
      accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(-dmin * ab.d), accm[r]);
    }
  }
  for (int r = 0; r < R; ++r) y[r * ldy] = hsum(acc[r]) + hsum(accm[r]);
}

void gemm_q4_k_decode(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws,
                      float* y, int64_t ldy) {
  const int64_t nb = k / 256;
  thread_local std::vector<int8_t> permuted;
  if (permuted.size() < size_t(m * k)) permuted.resize(size_t(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const auto* a = reinterpret_cast<const ActBlock256*>(static_cast<const uint8_t*>(x) + i * xs);
    for (int64_t b = 0; b < nb; ++b) permute_for_q4_k(a[b].q, permuted.data() + i * k + 256 * b);
  }
  for (int64_t i0 = 0; i0 < m; i0 += 4) {
    const int64_t r = m - i0 < 4 ? m - i0 : 4;
    const ActBlock256* a[4];
    const int8_t* aq[4];
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t row = i0 + (i < r ? i : 0);
      a[i] = reinterpret_cast<const ActBlock256*>(static_cast<const uint8_t*>(x) + row * xs);
      aq[i] = permuted.data() + row * k;
    }
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* wj = w + j * ws;
      float* yj = y + i0 * ldy + j;
      with_rows<4>(int(r), [&](auto R) { row_q4_k_decode<decltype(R)::value>(wj, a, aq, nb, yj, ldy); });
    }
  }
}

// ---- Q4_K weights repacked at load (Q4KRows16, quant-kernels.h)

// One super-block of sixteen Q4_K rows as repack_q4_k_rows16 lays it out: 2368 bytes, 64-aligned
// in the groups' buffer. nib[s][q] byte 4u + t: low nibble value 32s + 4q + t of row u, high
// nibble value 32s + 16 + 4q + t — so that after masking each 32-bit lane holds four consecutive
// values of one row, ready for vpdpbusd against four activation bytes broadcast.
struct Q4KGroupBlock {
  uint16_t d[kLanes], dmin[kLanes];  // f16, as the file has them
  uint8_t sc[8][kLanes], m[8][kLanes];
  uint8_t nib[8][4][64];
};
static_assert(sizeof(Q4KGroupBlock) == 2368 && sizeof(Q4KGroupBlock) % 64 == 0);

// Sixteen bytes widened to int32 lanes, sixteen f16 to f32 (the masked forms, full masks: the
// unmasked ones start from an undefined vector, which GCC 12 warns of).
inline __m512i bytes_to_i32(const uint8_t* p) {
  return _mm512_maskz_cvtepu8_epi32(0xffff, _mm_load_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m512 f16_to_f32(const uint16_t* p) {
  return _mm512_maskz_cvtph_ps(0xffff, _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
}

size_t q4_k_rows16_group_bytes(int64_t k) { return size_t(k / 256) * sizeof(Q4KGroupBlock); }
size_t q4_k_rows16_bytes(int64_t rows, int64_t k) {
  return size_t((rows + kLanes - 1) / kLanes) * q4_k_rows16_group_bytes(k);
}

void repack_q4_k_rows16(const uint8_t* w, size_t ws, int64_t rows, int64_t k, uint8_t* out) {
  const int64_t nb = k / 256, groups = (rows + kLanes - 1) / kLanes;
  auto* gb = reinterpret_cast<Q4KGroupBlock*>(out);
  Unpacked un;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t b = 0; b < nb; ++b) {
      Q4KGroupBlock& o = gb[g * nb + b];
      std::memset(&o, 0, sizeof o);
      for (int u = 0; u < kLanes && g * kLanes + u < rows; ++u) {
        const uint8_t* blk = w + (g * kLanes + u) * ws + b * 144;
        unpack_q45_k<false>(blk, u, un);  // row u's 256 values in order, its scales and mins
        std::memcpy(&o.d[u], blk, 2);
        std::memcpy(&o.dmin[u], blk + 2, 2);
        for (int s = 0; s < 8; ++s) {
          o.sc[s][u] = uint8_t(un.sc[s][u]);
          o.m[s][u] = uint8_t(un.off[s][u][0]);
          const uint8_t* v = un.v[u] + 32 * s;
          uint8_t pairs[16];  // value 32s + i in the low nibble, 32s + 16 + i in the high one
          for (int i = 0; i < 16; ++i) pairs[i] = uint8_t(v[i] | (v[16 + i] << 4));
          for (int q = 0; q < 4; ++q) std::memcpy(&o.nib[s][q][4 * u], pairs + 4 * q, 4);
        }
      }
    }
}

// R activation rows (ActBlock256; bs32[r][8b + s] = the sum of a row's sub-block s of super-block
// b) against one group: per super-block the portable kernel's integers (quant-kernels-scalar.cpp),
// sumi = Σ_s sc_s · Σ_{v∈s} q_v · a_v and summ = Σ_s m_s · Σ_{v∈s} a_v, lane u for row u, then
// y += (d · a.d) · sumi − (dmin · a.d) · summ.
template <int R>
void rows_against_q4_k_group(const Q4KGroupBlock* gb, const ActBlock256* const* a, const int32_t* const* bs32,
                             int64_t nb, float (*out)[kLanes]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q4KGroupBlock& p = gb[b];
    __m512i sumi[R], summ[R];
    for (int r = 0; r < R; ++r) sumi[r] = summ[r] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      __m512i part[R];
      for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        const __m512i x = _mm512_load_si512(p.nib[s][q]);
        const __m512i lo = _mm512_and_si512(x, low4), hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), low4);
        for (int r = 0; r < R; ++r) {
          int32_t a0, a1;
          std::memcpy(&a0, a[r][b].q + 32 * s + 4 * q, 4);
          std::memcpy(&a1, a[r][b].q + 32 * s + 16 + 4 * q, 4);
          part[r] = _mm512_dpbusd_epi32(part[r], lo, _mm512_set1_epi32(a0));
          part[r] = _mm512_dpbusd_epi32(part[r], hi, _mm512_set1_epi32(a1));
        }
      }
      // A lane's mins byte widened to 32 bits is an int16 pair (m, 0): vpdpwssd against the
      // sub-block's sum (|Σ a| ≤ 32 · 127 fits int16) adds m · Σ a.
      const __m512i scv = bytes_to_i32(p.sc[s]);
      const __m512i mv = bytes_to_i32(p.m[s]);
      for (int r = 0; r < R; ++r) {
        sumi[r] = _mm512_add_epi32(sumi[r], _mm512_mullo_epi32(part[r], scv));
        summ[r] = _mm512_dpwssd_epi32(summ[r], mv, _mm512_set1_epi32(bs32[r][8 * b + s]));
      }
    }
    const __m512 d = f16_to_f32(p.d);
    const __m512 dmin = f16_to_f32(p.dmin);
    for (int r = 0; r < R; ++r) {
      const __m512 ad = _mm512_set1_ps(a[r][b].d);
      acc[r] = _mm512_fmadd_ps(to_f32(sumi[r]), _mm512_mul_ps(d, ad), acc[r]);
      acc[r] = _mm512_fnmadd_ps(to_f32(summ[r]), _mm512_mul_ps(dmin, ad), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out[r], acc[r]);
}

constexpr int kRows16Tile = 4;  // activation rows per pass over a group

// 8-bit activation rows (ActBlock256) against groups: w = the group holding the call's first
// weight row (a multiple of 16), ws = q4_k_rows16_group_bytes(k).
void gemm_q4_k_rows16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws,
                      float* y, int64_t ldy) {
  const int64_t nb = k / 256, nsub = k / 32;
  thread_local std::vector<int32_t> sums;
  if (sums.size() < size_t(m * nsub)) sums.resize(size_t(m * nsub));
  for (int64_t i = 0; i < m; ++i) {
    const auto* a = reinterpret_cast<const ActBlock256*>(static_cast<const uint8_t*>(x) + i * xs);
    for (int64_t s = 0; s < nsub; ++s)
      sums[size_t(i * nsub + s)] = a[s / 8].bsum[2 * (s % 8)] + a[s / 8].bsum[2 * (s % 8) + 1];
  }
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    const int rows = int(n - j0 < kLanes ? n - j0 : kLanes);
    const auto* gb = reinterpret_cast<const Q4KGroupBlock*>(w + (j0 / kLanes) * ws);
    for (int64_t i0 = 0; i0 < m; i0 += kRows16Tile) {
      const int r = int(m - i0 < kRows16Tile ? m - i0 : kRows16Tile);
      const ActBlock256* a[kRows16Tile];
      const int32_t* bs[kRows16Tile];
      for (int i = 0; i < kRows16Tile; ++i) {
        const int64_t row = i0 + (i < r ? i : 0);
        a[i] = reinterpret_cast<const ActBlock256*>(static_cast<const uint8_t*>(x) + row * xs);
        bs[i] = sums.data() + row * nsub;
      }
      float out[kRows16Tile][kLanes];
      with_rows<kRows16Tile>(r, [&](auto R) { rows_against_q4_k_group<decltype(R)::value>(gb, a, bs, nb, out); });
      for (int i = 0; i < r; ++i) std::memcpy(y + (i0 + i) * ldy + j0, out[i], size_t(rows) * sizeof(float));
    }
  }
}

// The 16-bit prompt table on groups: each super-block's Packed16 built from the group — the same
// int16 values, d and mins as unpack16 gives from the file's rows, so a product has the same bits
// as gemm_k_prompt16<KType::q4_k> on the rows as the file has them.
void packed16_from_group(const Q4KGroupBlock& g, Packed16& p) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  // dwords 0, 2, …, 30 and 1, 3, …, 31 of the pair (A, B): the even and odd words of 16 rows.
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int s = 0; s < 8; ++s) {
    const __m512i sc32 = bytes_to_i32(g.sc[s]);
    const __m512i sc16 = _mm512_or_si512(sc32, _mm512_maskz_slli_epi32(0xffff, sc32, 16));
    for (int q = 0; q < 4; ++q)
      for (int half = 0; half < 2; ++half) {  // low nibbles: values 32s + 4q …; high: 32s + 16 + 4q …
        const auto* src = reinterpret_cast<const __m256i*>(g.nib[s][q]);
        __m256i x0 = _mm256_load_si256(src), x1 = _mm256_load_si256(src + 1);  // rows 0-7, 8-15
        if (half) x0 = _mm256_srli_epi16(x0, 4), x1 = _mm256_srli_epi16(x1, 4);
        const __m512i a = _mm512_cvtepu8_epi16(_mm256_and_si256(x0, low4));
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_and_si256(x1, low4));
        const int word = 16 * s + 8 * half + 2 * q;
        p.w[word] = _mm512_mullo_epi16(_mm512_permutex2var_epi32(a, even, b), sc16);
        p.w[word + 1] = _mm512_mullo_epi16(_mm512_permutex2var_epi32(a, odd, b), sc16);
      }
  }
  p.d = f16_to_f32(g.d);
  const __m512 dmin = f16_to_f32(g.dmin);
  for (int c = 0; c < 8; ++c)
    p.mins[c] = _mm512_mul_ps(dmin, to_f32(bytes_to_i32(g.m[c])));
}

void gemm_q4_k_rows16_prompt16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w,
                               size_t ws, float* y, int64_t ldy) {
  const int64_t nb = k / 256;
  gemm_repacked<Packed16>(
      m, n, k, x, xs, y, ldy,
      [&](int64_t j0, int, int64_t b, Packed16& p) {
        packed16_from_group(reinterpret_cast<const Q4KGroupBlock*>(w + (j0 / kLanes) * ws)[b], p);
      },
      [&](auto R, const Packed16* pk, const uint8_t* const* a, float (*out)[kLanes]) {
        rows_against_group16<KType::q4_k, decltype(R)::value>(pk, a, nb, out);
      });
}

// ---- Legacy 32-value blocks (Q4_0, Q4_1, Q5_0, Q5_1) against 16-bit activation blocks

// Every block has its own f16 scale (and Q4_1/Q5_1 an offset), so unlike the K-quants no scale
// goes inside the int16 values: a block's integer sum Σ q · a is scaled in f32 by d · a.d, and the
// offset m adds m · a.d · Σ a. Eight blocks (256 values) of sixteen rows are repacked at a time;
// rows of k = 32 · (8c + r) end in a chunk of r blocks (Gemma 3's 640 and SmolLM2's 576 columns,
// the reason those files have legacy types). A block's integer sum: 32 · 31 · 32768 < 2³¹.
enum class LType { q4_0, q4_1, q5_0, q5_1 };

template <LType T>
struct LTraits;
template <>
struct LTraits<LType::q4_0> {
  static constexpr size_t bytes = 18, qs = 2, qh = 0;
  static constexpr bool with_min = false, five = false;
  static constexpr int offset = 8;
};
template <>
struct LTraits<LType::q4_1> {
  static constexpr size_t bytes = 20, qs = 4, qh = 0;
  static constexpr bool with_min = true, five = false;
  static constexpr int offset = 0;
};
template <>
struct LTraits<LType::q5_0> {
  static constexpr size_t bytes = 22, qs = 6, qh = 2;
  static constexpr bool with_min = false, five = true;
  static constexpr int offset = 16;
};
template <>
struct LTraits<LType::q5_1> {
  static constexpr size_t bytes = 24, qs = 8, qh = 4;
  static constexpr bool with_min = true, five = true;
  static constexpr int offset = 0;
};

// Eight blocks of sixteen rows: w[16c + t] lane u = values 2t, 2t + 1 of block c of row u (int16,
// the offset subtracted); d[c], m[c] lane u = block c's scale and offset of row u (zero past the
// row's last block and the weight's last row).
struct PackedL {
  __m512i w[128];
  __m512 d[8], m[8];
};

struct UnpackedL {
  alignas(64) int16_t v[kLanes][256];
  float d[8][kLanes], m[8][kLanes];
};

// Row u's blocks [0, nblk) of this chunk (w: its first block) as int16, in a lane per value: byte j
// of qs holds value j in its low nibble and value j + 16 in its high one, bit j of qh value j's
// fifth bit (core/format/quant.cpp).
template <LType T>
void unpack_legacy(const uint8_t* w, int nblk, int u, UnpackedL& o) {
  using Tr = LTraits<T>;
  const __m128i low4 = _mm_set1_epi8(0x0f);
  for (int c = 0; c < nblk; ++c, w += Tr::bytes) {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + Tr::qs));
    const __m128i lo = _mm_and_si128(qs, low4), hi = _mm_and_si128(_mm_srli_epi16(qs, 4), low4);
    __m512i v = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));  // lanes 0-15 values j, 16-31 values j + 16
    if constexpr (Tr::five) {
      uint32_t qh;
      std::memcpy(&qh, w + Tr::qh, 4);
      v = _mm512_mask_add_epi16(v, __mmask32(qh), v, _mm512_set1_epi16(16));
    }
    if constexpr (Tr::offset != 0) v = _mm512_sub_epi16(v, _mm512_set1_epi16(Tr::offset));
    _mm512_store_si512(o.v[u] + 32 * c, v);
    o.d[c][u] = f16_at(w);
    o.m[c][u] = Tr::with_min ? f16_at(w + 2) : 0.f;
  }
}

void interleave_legacy(const UnpackedL& o, PackedL& p) {
  for (int blk = 0; blk < 8; ++blk) {
    __m512i r[16];
    for (int u = 0; u < kLanes; ++u) r[u] = _mm512_load_si512(o.v[u] + 32 * blk);
    transpose16(r, p.w + 16 * blk);
    p.d[blk] = _mm512_loadu_ps(o.d[blk]);
    p.m[blk] = _mm512_loadu_ps(o.m[blk]);
  }
}

// R activation rows against one repacked chunk of nblk blocks (blocks b0 … b0 + nblk − 1 of the
// rows), accumulated into acc.
template <bool with_min, int R>
void rows_against_legacy(const PackedL& p, int nblk, int64_t b0, const ActBlock32W* const* a,
                         const int32_t* const* sums, __m512* acc) {
  for (int c = 0; c < nblk; ++c) {
    __m512i part[R];
    for (int r = 0; r < R; ++r) part[r] = _mm512_setzero_si512();
    for (int t = 0; t < 16; ++t) {
      const __m512i wv = p.w[16 * c + t];
      for (int r = 0; r < R; ++r) {
        int32_t pair;
        std::memcpy(&pair, a[r][b0 + c].q + 2 * t, 4);
        part[r] = _mm512_dpwssd_epi32(part[r], wv, _mm512_set1_epi32(pair));
      }
    }
    for (int r = 0; r < R; ++r) {
      const float ad = a[r][b0 + c].d;
      acc[r] = _mm512_fmadd_ps(to_f32(part[r]), _mm512_mul_ps(p.d[c], _mm512_set1_ps(ad)), acc[r]);
      if constexpr (with_min) acc[r] = _mm512_fmadd_ps(p.m[c], _mm512_set1_ps(ad * float(sums[r][b0 + c])), acc[r]);
    }
  }
}

template <LType T>
void gemm_legacy_prompt16(int64_t m, int64_t n, int64_t k, const void* x, size_t xs, const uint8_t* w, size_t ws,
                          float* y, int64_t ldy) {
  using Tr = LTraits<T>;
  const int64_t nblk = k / 32, nchunk = (nblk + 7) / 8;
  thread_local std::vector<PackedL> packed;
  thread_local std::vector<UnpackedL> unpacked(1);
  if (packed.size() < size_t(nchunk)) packed.resize(size_t(nchunk));
  UnpackedL& un = unpacked[0];
  for (int64_t j0 = 0; j0 < n; j0 += kLanes) {
    const int rows = int(n - j0 < kLanes ? n - j0 : kLanes);
    for (int64_t ch = 0; ch < nchunk; ++ch) {
      const int cb = int(nblk - 8 * ch < 8 ? nblk - 8 * ch : 8);
      if (rows < kLanes || cb < 8) std::memset(&un, 0, sizeof un);
      for (int u = 0; u < rows; ++u) unpack_legacy<T>(w + (j0 + u) * ws + 8 * ch * Tr::bytes, cb, u, un);
      interleave_legacy(un, packed[size_t(ch)]);
    }
    for (int64_t i0 = 0; i0 < m; i0 += kRowTile) {
      const int r = int(m - i0 < kRowTile ? m - i0 : kRowTile);
      const ActBlock32W* a[kRowTile];
      const int32_t* sums[kRowTile];
      for (int i = 0; i < kRowTile; ++i) {
        const auto* row = static_cast<const uint8_t*>(x) + (i0 + (i < r ? i : 0)) * xs;
        a[i] = reinterpret_cast<const ActBlock32W*>(row);
        sums[i] = reinterpret_cast<const int32_t*>(row + size_t(nblk) * sizeof(ActBlock32W));
      }
      float out[kRowTile][kLanes];
      with_rows<kRowTile>(r, [&](auto R) {
        constexpr int rr = decltype(R)::value;
        __m512 acc[rr];
        for (int i = 0; i < rr; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t ch = 0; ch < nchunk; ++ch)
          rows_against_legacy<Tr::with_min, rr>(packed[size_t(ch)], int(nblk - 8 * ch < 8 ? nblk - 8 * ch : 8), 8 * ch,
                                                a, sums, acc);
        for (int i = 0; i < rr; ++i) _mm512_storeu_ps(out[i], acc[i]);
      });
      for (int i = 0; i < r; ++i) std::memcpy(y + (i0 + i) * ldy + j0, out[i], size_t(rows) * sizeof(float));
    }
  }
}

void quantize_act8(const float* x, uint8_t* row, int64_t k) {
  quant_kernels().quantize_act256(x, reinterpret_cast<ActBlock256*>(row), k);
}
size_t act8_row_bytes(int64_t k) { return size_t(k / 256) * sizeof(ActBlock256); }

}  // namespace

extern const PromptKernels kPromptKernelsVnni16, kPromptKernelsVnni8;
const PromptKernels kPromptKernelsVnni16 = {"avx512-vnni-16",
                                            act16_row_bytes,
                                            quantize_act16,
                                            gemm_k_prompt16<KType::q4_k>,
                                            gemm_k_prompt16<KType::q5_k>,
                                            gemm_k_prompt16<KType::q6_k>,
                                            gemm_q4_k_rows16_prompt16,
                                            gemm_legacy_prompt16<LType::q4_0>,
                                            gemm_legacy_prompt16<LType::q4_1>,
                                            gemm_legacy_prompt16<LType::q5_0>,
                                            gemm_legacy_prompt16<LType::q5_1>};
extern const GemmFn kGemmQ6KWideVnni, kGemmQ4KDecodeVnni;
const GemmFn kGemmQ6KWideVnni = gemm_q6_k_wide;
const GemmFn kGemmQ4KDecodeVnni = gemm_q4_k_decode;
const PromptKernels kPromptKernelsVnni8 = {"avx512-vnni-8", act8_row_bytes, quantize_act8,
                                           gemm_k_prompt<KType::q4_k>, gemm_k_prompt<KType::q5_k>,
                                           gemm_k_prompt<KType::q6_k>, gemm_q4_k_rows16,
                                           nullptr, nullptr, nullptr, nullptr};  // legacy types: the f32 path
extern const Q4KRows16 kQ4KRows16Vnni;
const Q4KRows16 kQ4KRows16Vnni = {q4_k_rows16_bytes, q4_k_rows16_group_bytes, repack_q4_k_rows16, gemm_q4_k_rows16};

}  // namespace ragkv
#endif
