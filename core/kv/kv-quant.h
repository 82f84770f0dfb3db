// Quantised chunk-KV layer blocks: a stored layer's K and V in 8 or 4 bits
// with group scales, decoded back to the f16 KV every mode uses. The method is KIVI's (Liu et al.,
// "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", ICML 2024, §3): asymmetric
// (min + scale) integer groups, K quantised per channel — each channel's values over a group of
// consecutive tokens share a scale, because K has a few outlier channels of persistently large
// magnitude that per-token groups would spread over every other channel's codes — and V per
// token — each token's values over a group of consecutive channels share one, V having no such
// channel structure. CacheGen (Liu et al., SIGCOMM 2024, §5) stores and loads KV compressed this
// way to cut the bytes a cache costs on disk and the time to load it; its delta coding between
// tokens and arithmetic coding are not done here (plain fixed-width codes, decoded fast).
//
// One layer block, for K [n][d] then V [n][d] (n tokens, d = kv_dim channels), little-endian:
//   K: f16 scale[⌈n/Gk⌉][d] | f16 min[⌈n/Gk⌉][d] | codes[n][row]   (group: channel c, tokens
//      [g·Gk, (g+1)·Gk) — the last group holds the n mod Gk tokens left, when there are any)
//   V: f16 scale[n][⌈d/Gv⌉] | f16 min[n][⌈d/Gv⌉] | codes[n][row]   (group: token t, channels
//      [g·Gv, (g+1)·Gv), the last one shorter when Gv does not divide d)
//   codes: row = ⌈d·bits/8⌉ bytes per token, channel c's code in byte c (8 bits) or in the low
//   (c even) / high (c odd) nibble of byte c/2 (4 bits). x ≈ min + q·scale, q ∈ [0, 2^bits − 1].
// The writer picks min ≤ the group's minimum and scale ≥ (max − min)/(2^bits − 1) among f16
// values, so every value lies in the coded range and the error is at most scale/2 before the
// result's own f16 rounding (kv_quant_error_bound).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ragkv {

// How a chunk file stores its KV: f16 as computed (bits = 16), or quantised groups.
struct KvEncoding {
  uint32_t bits = 16;      // 16, 8 or 4
  uint32_t k_group = 32;   // K: tokens per group of one channel (per-channel scales)
  uint32_t v_group = 32;   // V: channels per group of one token (per-token scales)

  bool quantised() const { return bits != 16; }
  // "f16", "q8", "q4": store.json's dtype and the name in reports.
  std::string name() const;
  // --kv-bits 16|8|4 with the default groups; Error naming the accepted values otherwise.
  static KvEncoding from_bits(int bits);
  // store.json's dtype ("f16", "q8", "q4"); Error naming the accepted values otherwise.
  static KvEncoding from_name(const std::string& dtype);
  // bits ∈ {16, 8, 4} and groups in [1, 65536] (what the file reader accepts).
  bool valid() const;
  bool operator==(const KvEncoding&) const = default;
};

// Bytes of one layer's K + V block of n tokens and d channels in this encoding (2·n·d·2 for
// f16); nullopt when the count overflows 64 bits.
std::optional<uint64_t> kv_layer_block_bytes(const KvEncoding& e, uint64_t n_tokens, uint64_t kv_dim);
// Mean bytes per token of a chunk of n_tokens over n_layer layers (K + V, group scales
// included); for n_tokens a multiple of k_group this is also the long-chunk rate.
double kv_bytes_per_token(const KvEncoding& e, uint32_t n_layer, uint32_t kv_dim, uint32_t n_tokens = 0);

// Quantises one layer: k, v f16 [n][d] → out (kv_layer_block_bytes bytes). e.quantised() only.
// Deterministic (a resumed precompute writes the same bytes). Non-finite inputs (never produced
// by a sound forward pass) are coded as the group's nearest finite end (NaN as its minimum).
void kv_quantise_layer(const KvEncoding& e, const uint16_t* k, const uint16_t* v, uint32_t n, uint32_t d,
                       uint8_t* out);
// Decodes one layer block back to f16 [n][d] K and V. e.quantised() only; any bytes decode (the
// block's checksum is the caller's).
void kv_dequantise_layer(const KvEncoding& e, const uint8_t* block, uint32_t n, uint32_t d, uint16_t* k_out,
                         uint16_t* v_out);

// The largest |x − decoded(x)| the encoding allows for a group whose values span [lo, hi]
// (|lo|, |hi| ≤ 65504): half a code step — the step at most (hi − lo)/(2^bits − 1) widened by the
// f16 rounding of min and scale — plus the decoded value's own f16 rounding. For tests.
double kv_quant_error_bound(const KvEncoding& e, double lo, double hi);

}  // namespace ragkv
