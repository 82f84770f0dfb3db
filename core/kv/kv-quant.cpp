// KIVI-style KV groups (see the header for the method and the block layout): quantise when a
// chunk file is written, dequantise to f16 when a layer is read.
#include "core/kv/kv-quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/format/fp16.h"
#include "core/util/error.h"

namespace ragkv {

namespace {

constexpr uint32_t kMaxGroup = 65536;

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
uint32_t code_max(const KvEncoding& e) { return (1u << e.bits) - 1; }
size_t code_row_bytes(const KvEncoding& e, uint32_t d) { return (size_t(d) * e.bits + 7) / 8; }

// The largest f16 ≤ x (x finite, |x| ≤ 65504).
f16_t f16_at_most(float x) {
  f16_t h = fp32_to_fp16(x);
  if (fp16_to_fp32(h) > x) {
    if (h == 0x0000) h = 0x8001;        // +0 → the smallest negative subnormal
    else if (h & 0x8000) h = f16_t(h + 1);  // negative: one step away from zero
    else h = f16_t(h - 1);
  }
  return h;
}

// The smallest f16 ≥ x ≥ 0.
f16_t f16_at_least(float x) {
  f16_t h = fp32_to_fp16(x);
  if (fp16_to_fp32(h) < x) h = f16_t(h + 1);
  return h;
}

// One group's parameters for values spanning [lo, hi]: min = lo rounded down to f16, scale the
// least f16 step with min + qmax·scale ≥ hi (so no value is clamped at the top).
void group_params(float lo, float hi, uint32_t qmax, f16_t* scale, f16_t* min) {
  const f16_t mh = f16_at_most(lo);
  const float mf = fp16_to_fp32(mh);
  f16_t sh = f16_at_least((hi - mf) / float(qmax));
  while (mf + float(qmax) * fp16_to_fp32(sh) < hi) sh = f16_t(sh + 1);
  *scale = sh;
  *min = mh;
}

// The value quantisation sees: non-finite inputs at the finite range's ends (NaN at lo).
float finite_or(float x, float lo, float hi) {
  if (std::isnan(x)) return lo;
  return std::clamp(x, lo, hi);
}

uint8_t code_of(float x, float mf, float sf, uint32_t qmax) {
  if (sf <= 0) return 0;
  const float q = std::nearbyint((x - mf) / sf);
  return uint8_t(std::clamp(q, 0.0f, float(qmax)));
}

// codes q[d] (one byte each) → a packed row.
void pack_row(const KvEncoding& e, const uint8_t* q, uint32_t d, uint8_t* row) {
  if (e.bits == 8) {
    std::memcpy(row, q, d);
    return;
  }
  for (uint32_t c = 0; c + 1 < d; c += 2) row[c / 2] = uint8_t(q[c] | (q[c + 1] << 4));
  if (d % 2) row[d / 2] = q[d - 1];
}

// A packed row → codes q[d].
void unpack_row(const KvEncoding& e, const uint8_t* row, uint32_t d, uint8_t* q) {
  if (e.bits == 8) {
    std::memcpy(q, row, d);
    return;
  }
  for (uint32_t i = 0; i < d / 2; ++i) {
    q[2 * i] = row[i] & 0x0f;
    q[2 * i + 1] = row[i] >> 4;
  }
  if (d % 2) q[d - 1] = row[d / 2] & 0x0f;
}

// out[c] = f16(min[c] + q[c]·scale[c]): the hot loop of a load (vectorised by the compiler).
void decode_row(const uint8_t* q, const float* scale, const float* min, uint32_t d, float* f, uint16_t* out) {
  for (uint32_t c = 0; c < d; ++c) f[c] = min[c] + float(q[c]) * scale[c];
  fp32_to_fp16_row(f, out, d);
}

struct Layout {  // byte offsets of one matrix (K or V) inside a layer block
  size_t params, codes, bytes;  // params: scale then min, n_param f16 each
  size_t n_param;
};

Layout k_layout(const KvEncoding& e, uint32_t n, uint32_t d) {
  Layout l;
  l.n_param = size_t(ceil_div(n, e.k_group)) * d;
  l.params = 0;
  l.codes = 2 * l.n_param * sizeof(f16_t);
  l.bytes = l.codes + size_t(n) * code_row_bytes(e, d);
  return l;
}

Layout v_layout(const KvEncoding& e, uint32_t n, uint32_t d) {
  Layout l;
  l.n_param = size_t(n) * ceil_div(d, e.v_group);
  l.params = 0;
  l.codes = 2 * l.n_param * sizeof(f16_t);
  l.bytes = l.codes + size_t(n) * code_row_bytes(e, d);
  return l;
}

void put_f16(uint8_t* base, size_t i, f16_t h) { std::memcpy(base + 2 * i, &h, 2); }

// K per channel (KIVI §3.2): for each group of k_group tokens, each channel's own min and scale.
void quantise_k(const KvEncoding& e, const uint16_t* k, uint32_t n, uint32_t d, uint8_t* out) {
  const Layout lay = k_layout(e, n, d);
  uint8_t* scales = out;
  uint8_t* mins = out + lay.n_param * 2;
  const uint32_t qmax = code_max(e);
  std::vector<float> lo(d), hi(d), sf(d), mf(d);
  std::vector<uint8_t> q(d);
  for (uint32_t g = 0; g * e.k_group < n; ++g) {
    const uint32_t t0 = g * e.k_group, t1 = std::min(n, t0 + e.k_group);
    std::fill(lo.begin(), lo.end(), INFINITY);
    std::fill(hi.begin(), hi.end(), -INFINITY);
    for (uint32_t t = t0; t < t1; ++t)
      for (uint32_t c = 0; c < d; ++c) {
        const float x = fp16_to_fp32(k[size_t(t) * d + c]);
        if (!std::isfinite(x)) continue;
        lo[c] = std::min(lo[c], x);
        hi[c] = std::max(hi[c], x);
      }
    for (uint32_t c = 0; c < d; ++c) {
      if (lo[c] > hi[c]) lo[c] = hi[c] = 0;  // no finite value in the group
      f16_t sh, mh;
      group_params(lo[c], hi[c], qmax, &sh, &mh);
      put_f16(scales, size_t(g) * d + c, sh);
      put_f16(mins, size_t(g) * d + c, mh);
      sf[c] = fp16_to_fp32(sh);
      mf[c] = fp16_to_fp32(mh);
    }
    for (uint32_t t = t0; t < t1; ++t) {
      for (uint32_t c = 0; c < d; ++c)
        q[c] = code_of(finite_or(fp16_to_fp32(k[size_t(t) * d + c]), lo[c], hi[c]), mf[c], sf[c], qmax);
      pack_row(e, q.data(), d, out + lay.codes + size_t(t) * code_row_bytes(e, d));
    }
  }
}

// V per token: for each token, each group of v_group channels its own min and scale.
void quantise_v(const KvEncoding& e, const uint16_t* v, uint32_t n, uint32_t d, uint8_t* out) {
  const Layout lay = v_layout(e, n, d);
  const uint32_t ng = ceil_div(d, e.v_group), qmax = code_max(e);
  uint8_t* scales = out;
  uint8_t* mins = out + lay.n_param * 2;
  std::vector<float> x(d);
  std::vector<uint8_t> q(d);
  for (uint32_t t = 0; t < n; ++t) {
    fp16_to_fp32_row(v + size_t(t) * d, x.data(), d);
    for (uint32_t g = 0; g < ng; ++g) {
      const uint32_t c0 = g * e.v_group, c1 = std::min(d, c0 + e.v_group);
      float lo = INFINITY, hi = -INFINITY;
      for (uint32_t c = c0; c < c1; ++c)
        if (std::isfinite(x[c])) lo = std::min(lo, x[c]), hi = std::max(hi, x[c]);
      if (lo > hi) lo = hi = 0;
      f16_t sh, mh;
      group_params(lo, hi, qmax, &sh, &mh);
      put_f16(scales, size_t(t) * ng + g, sh);
      put_f16(mins, size_t(t) * ng + g, mh);
      const float sf = fp16_to_fp32(sh), mf = fp16_to_fp32(mh);
      for (uint32_t c = c0; c < c1; ++c) q[c] = code_of(finite_or(x[c], lo, hi), mf, sf, qmax);
    }
    pack_row(e, q.data(), d, out + lay.codes + size_t(t) * code_row_bytes(e, d));
  }
}

void dequantise_k(const KvEncoding& e, const uint8_t* block, uint32_t n, uint32_t d, uint16_t* k) {
  const Layout lay = k_layout(e, n, d);
  const size_t row_bytes = code_row_bytes(e, d);
  std::vector<f16_t> h(d);
  std::vector<float> sf(d), mf(d), f(d);
  std::vector<uint8_t> q(d);
  for (uint32_t g = 0; g * e.k_group < n; ++g) {
    std::memcpy(h.data(), block + size_t(g) * d * 2, size_t(d) * 2);
    fp16_to_fp32_row(h.data(), sf.data(), d);
    std::memcpy(h.data(), block + lay.n_param * 2 + size_t(g) * d * 2, size_t(d) * 2);
    fp16_to_fp32_row(h.data(), mf.data(), d);
    const uint32_t t1 = std::min(n, (g + 1) * e.k_group);
    for (uint32_t t = g * e.k_group; t < t1; ++t) {
      unpack_row(e, block + lay.codes + size_t(t) * row_bytes, d, q.data());
      decode_row(q.data(), sf.data(), mf.data(), d, f.data(), k + size_t(t) * d);
    }
  }
}

void dequantise_v(const KvEncoding& e, const uint8_t* block, uint32_t n, uint32_t d, uint16_t* v) {
  const Layout lay = v_layout(e, n, d);
  const uint32_t ng = ceil_div(d, e.v_group);
  const size_t row_bytes = code_row_bytes(e, d);
  std::vector<f16_t> h(ng);
  std::vector<float> gs(ng), gm(ng), sf(d), mf(d), f(d);
  std::vector<uint8_t> q(d);
  for (uint32_t t = 0; t < n; ++t) {
    std::memcpy(h.data(), block + size_t(t) * ng * 2, size_t(ng) * 2);
    fp16_to_fp32_row(h.data(), gs.data(), ng);
    std::memcpy(h.data(), block + lay.n_param * 2 + size_t(t) * ng * 2, size_t(ng) * 2);
    fp16_to_fp32_row(h.data(), gm.data(), ng);
    for (uint32_t c = 0; c < d; ++c) {  // each channel its group's scale and min
      sf[c] = gs[c / e.v_group];
      mf[c] = gm[c / e.v_group];
    }
    unpack_row(e, block + lay.codes + size_t(t) * row_bytes, d, q.data());
    decode_row(q.data(), sf.data(), mf.data(), d, f.data(), v + size_t(t) * d);
  }
}

}  // namespace

std::string KvEncoding::name() const {
  switch (bits) {
    case 16: return "f16";
    case 8: return "q8";
    case 4: return "q4";
    default: {
      std::string s(1, 'q');  // (not "q" + …: GCC 12 warns falsely, -Wrestrict)
      s += std::to_string(bits);
      return s;
    }
  }
}

KvEncoding KvEncoding::from_bits(int bits) {
  if (bits != 16 && bits != 8 && bits != 4) fail("--kv-bits {}: expected 16 (f16, as computed), 8 or 4", bits);
  KvEncoding e;
  e.bits = uint32_t(bits);
  return e;
}

KvEncoding KvEncoding::from_name(const std::string& dtype) {
  if (dtype == "f16") return from_bits(16);
  if (dtype == "q8") return from_bits(8);
  if (dtype == "q4") return from_bits(4);
  fail("KV dtype '{}': expected f16, q8 or q4", dtype);
}

bool KvEncoding::valid() const {
  return (bits == 16 || bits == 8 || bits == 4) && k_group >= 1 && k_group <= kMaxGroup && v_group >= 1 &&
         v_group <= kMaxGroup;
}

std::optional<uint64_t> kv_layer_block_bytes(const KvEncoding& e, uint64_t n, uint64_t d) {
  if (n > UINT32_MAX || d > UINT32_MAX) return std::nullopt;
  uint64_t nd;
  if (__builtin_mul_overflow(n, d, &nd) || nd > (UINT64_MAX >> 8)) return std::nullopt;
  if (!e.quantised()) return nd * 4;  // K and V, 2 bytes each
  const uint64_t row = (d * e.bits + 7) / 8;
  const uint64_t k_params = (n + e.k_group - 1) / e.k_group * d, v_params = n * ((d + e.v_group - 1) / e.v_group);
  return 2 * (n * row) + 4 * (k_params + v_params);  // codes, and scale + min f16 per group
}

double kv_bytes_per_token(const KvEncoding& e, uint32_t n_layer, uint32_t kv_dim, uint32_t n_tokens) {
  if (n_tokens == 0) n_tokens = e.quantised() ? e.k_group : 1;
  const auto b = kv_layer_block_bytes(e, n_tokens, kv_dim);
  return b ? double(*b) * n_layer / n_tokens : 0.0;
}

void kv_quantise_layer(const KvEncoding& e, const uint16_t* k, const uint16_t* v, uint32_t n, uint32_t d,
                       uint8_t* out) {
  if (!e.quantised() || !e.valid()) fail("internal: kv_quantise_layer with encoding {}", e.name());
  quantise_k(e, k, n, d, out);
  quantise_v(e, v, n, d, out + k_layout(e, n, d).bytes);
}

void kv_dequantise_layer(const KvEncoding& e, const uint8_t* block, uint32_t n, uint32_t d, uint16_t* k_out,
                         uint16_t* v_out) {
  if (!e.quantised() || !e.valid()) fail("internal: kv_dequantise_layer with encoding {}", e.name());
  dequantise_k(e, block, n, d, k_out);
  dequantise_v(e, block + k_layout(e, n, d).bytes, n, d, v_out);
}

double kv_quant_error_bound(const KvEncoding& e, double lo, double hi) {
  if (!e.quantised()) return 0;
  // step: (hi − lo)/qmax rounded up to an f16 (relative 2^-10, or one subnormal 2^-24); the
  // decoded value's f16 rounding and float arithmetic stay under 2^-10 of its magnitude.
  const double step = (hi - lo) / code_max(e) * (1 + 0x1p-10) + 0x1p-24;
  return step / 2 + 0x1p-10 * (std::max(std::fabs(lo), std::fabs(hi)) + step) + 0x1p-24;
}

}  // namespace ragkv
