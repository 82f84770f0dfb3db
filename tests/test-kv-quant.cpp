// Quantised chunk caches (core/kv/kv-quant.h): the KIVI groups' round-trip error within its stated
// bound per bit width on random and outlier-channel data — checked against group ranges computed
// here independently — K per channel beating per-token groups on outlier channels (KIVI's reason),
// sizes, determinism; version-4 chunk files read back as their decoded KV, damaged quantised files
// refused (truncated, layer bit flip, bad encoding); f16 files still written byte for byte as
// before; and the store's one encoding (store.json, --kv-bits mismatch, the prefix and exact chains
// kept f16).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/format/checksum.h"
#include "core/format/fp16.h"
#include "core/kv/kv-quant.h"
#include "core/kv/kv-store.h"
#include "core/kv/segment-kv.h"
#include "tests/test-tempdir.h"

namespace {

namespace fs = std::filesystem;
using namespace ragkv;
using ragkv::test::TempDir;

// f16 [n][d] of N(0, 1) values, the channels in `outliers` scaled by `outlier_scale` (K's
// outlier channels, KIVI Fig. 2), plus a per-channel offset.
std::vector<uint16_t> gaussian(uint32_t n, uint32_t d, uint32_t seed, std::vector<uint32_t> outliers = {},
                               float outlier_scale = 1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> offset(d);
  for (float& o : offset) o = 0.5f * g(rng);
  std::vector<uint16_t> out(size_t(n) * d);
  for (uint32_t t = 0; t < n; ++t)
    for (uint32_t c = 0; c < d; ++c) {
      float x = g(rng) + offset[c];
      if (std::find(outliers.begin(), outliers.end(), c) != outliers.end()) x *= outlier_scale;
      out[size_t(t) * d + c] = fp32_to_fp16(x);
    }
  return out;
}

struct RoundTrip {
  std::vector<uint16_t> k, v;  // decoded
  uint64_t bytes = 0;
};

RoundTrip round_trip(const KvEncoding& e, const std::vector<uint16_t>& k, const std::vector<uint16_t>& v, uint32_t n,
                     uint32_t d) {
  RoundTrip r;
  r.bytes = *kv_layer_block_bytes(e, n, d);
  std::vector<uint8_t> block(r.bytes);
  kv_quantise_layer(e, k.data(), v.data(), n, d, block.data());
  r.k.resize(k.size());
  r.v.resize(v.size());
  kv_dequantise_layer(e, block.data(), n, d, r.k.data(), r.v.data());
  return r;
}

float at(const std::vector<uint16_t>& m, uint32_t d, uint32_t t, uint32_t c) { return fp16_to_fp32(m[size_t(t) * d + c]); }

// Every value within the bound of its own group: K's groups per channel over k_group tokens, V's
// per token over v_group channels (ranges found here, not by the quantiser). Returns the largest
// error seen over the bound (≤ 1 when every value is within it).
double worst_over_bound(const KvEncoding& e, const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, uint32_t n,
                        uint32_t d, bool per_channel) {
  double worst = 0;
  const uint32_t g_len = per_channel ? e.k_group : e.v_group, outer = per_channel ? d : n, inner = per_channel ? n : d;
  for (uint32_t o = 0; o < outer; ++o)
    for (uint32_t g0 = 0; g0 < inner; g0 += g_len) {
      const uint32_t g1 = std::min(inner, g0 + g_len);
      auto val = [&](const std::vector<uint16_t>& m, uint32_t i) { return per_channel ? at(m, d, i, o) : at(m, d, o, i); };
      double lo = INFINITY, hi = -INFINITY;
      for (uint32_t i = g0; i < g1; ++i) lo = std::min(lo, double(val(x, i))), hi = std::max(hi, double(val(x, i)));
      const double bound = kv_quant_error_bound(e, lo, hi);
      for (uint32_t i = g0; i < g1; ++i) worst = std::max(worst, std::fabs(double(val(y, i)) - val(x, i)) / bound);
    }
  return worst;
}

// RMS of the error relative to each channel's own RMS magnitude: what an outlier channel does to
// the other channels sharing its groups (KIVI §3: per-token groups on K spread it over all).
double channel_relative_rms_error(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y, uint32_t n, uint32_t d) {
  double s = 0;
  for (uint32_t c = 0; c < d; ++c) {
    double mag = 0, err = 0;
    for (uint32_t t = 0; t < n; ++t) {
      mag += double(at(x, d, t, c)) * at(x, d, t, c);
      err += (double(at(y, d, t, c)) - at(x, d, t, c)) * (double(at(y, d, t, c)) - at(x, d, t, c));
    }
    s += err / mag;
  }
  return std::sqrt(s / d);
}

double rms_error(const std::vector<uint16_t>& x, const std::vector<uint16_t>& y) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = double(fp16_to_fp32(x[i])) - fp16_to_fp32(y[i]);
    s += e * e;
  }
  return std::sqrt(s / double(x.size()));
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void overwrite(const fs::path& p, const std::string& bytes) { std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes; }

uint32_t file_version(const fs::path& p) {
  const std::string b = slurp(p);
  uint32_t v = 0;
  std::memcpy(&v, b.data() + 8, 4);
  return v;
}

ChunkKvMeta meta(const std::string& chunk, uint32_t n_tokens, uint32_t n_layer = 3) {
  ChunkKvMeta m;
  m.model_fingerprint = "model-q";
  m.chunk_id = chunk;
  m.prefix = "canonical:00";
  m.n_layer = n_layer;
  m.n_kv_head = 3;
  m.head_dim = 16;  // kv_dim 48: one full V group of 32 and one of 16
  m.n_tokens = n_tokens;
  std::vector<int32_t> ids(n_tokens, 7);
  m.token_hash = token_ids_hash(ids);
  return m;
}

struct LayerData {
  std::vector<std::vector<uint16_t>> k, v;
  std::vector<const uint16_t*> kp, vp;
  LayerData(const ChunkKvMeta& m, uint32_t seed) {
    for (uint32_t l = 0; l < m.n_layer; ++l) {
      k.push_back(gaussian(m.n_tokens, m.kv_dim(), seed + 2 * l, {3}, 20));
      v.push_back(gaussian(m.n_tokens, m.kv_dim(), seed + 2 * l + 1));
    }
    for (uint32_t l = 0; l < m.n_layer; ++l) kp.push_back(k[l].data()), vp.push_back(v[l].data());
  }
};

KvStoreInfo store_info(const std::string& dtype) {
  KvStoreInfo i;
  i.model_fingerprint = "model-q";
  i.model_name = "model-q.gguf";
  i.n_layer = 3;
  i.n_kv_head = 3;
  i.head_dim = 16;
  i.prefix = "canonical:00";
  i.dtype = dtype;
  return i;
}

}  // namespace

TEST_CASE("kv quant: every value within its group's bound, per bit width, on random and outlier-channel data") {
  // Token and channel counts that are not multiples of the groups: partial last groups both ways.
  for (uint32_t bits : {8u, 4u})
    for (const auto& [n, d] : {std::pair<uint32_t, uint32_t>{77, 192}, {5, 100}, {64, 33}, {1, 1}}) {
      CAPTURE(bits);
      CAPTURE(n);
      CAPTURE(d);
      const KvEncoding e = KvEncoding::from_bits(int(bits));
      const auto k = gaussian(n, d, 11 + n, {0, d / 2, d - 1}, 40), v = gaussian(n, d, 12 + d);
      const RoundTrip r = round_trip(e, k, v, n, d);
      CHECK(worst_over_bound(e, k, r.k, n, d, /*per_channel=*/true) <= 1.0);
      CHECK(worst_over_bound(e, v, r.v, n, d, /*per_channel=*/false) <= 1.0);
    }
}

TEST_CASE("kv quant: the RMS error per bit width, and K per channel beats per-token groups on outlier channels") {
  // (the outlier channels' own error grows with their range either way; what per-channel groups
  // save is the other channels' precision, so the error is measured relative to each channel)
  const uint32_t n = 96, d = 192;
  // K with three outlier channels 30x the others (KIVI Fig. 2: a few channels of large magnitude).
  const auto k = gaussian(n, d, 5, {7, 64, 130}, 30), v = gaussian(n, d, 6);
  double rms[2];
  for (int i = 0; i < 2; ++i) {
    const KvEncoding e = KvEncoding::from_bits(i == 0 ? 8 : 4);
    const RoundTrip r = round_trip(e, k, v, n, d);
    rms[i] = rms_error(v, r.v);
    // Per-token groups for K: quantise K through V's path (per token over 32 channels).
    const RoundTrip as_v = round_trip(e, v, k, n, d);
    const double per_channel = channel_relative_rms_error(k, r.k, n, d),
                 per_token = channel_relative_rms_error(k, as_v.v, n, d);
    MESSAGE(e.name() << ": V rms error " << rms[i] << "; K error relative to each channel's magnitude: per channel "
                     << per_channel << ", per token " << per_token);
    CHECK(per_channel < 0.25 * per_token);
  }
  // N(0,1) values in groups of 32 span about 4.5 sigma: step ≈ 4.5/255 (8 bits), 4.5/15 (4 bits),
  // uniform rounding error step/√12 — about 0.005 and 0.09.
  CHECK(rms[0] < 0.01);
  CHECK(rms[1] < 0.15);
  CHECK(rms[1] > 5 * rms[0]);  // 4 bits are visibly coarser: the measurement sees the difference
}

TEST_CASE("kv quant: constant groups and group ends decode exactly, non-finite values stay finite, encoding is deterministic") {
  const uint32_t n = 40, d = 64;
  std::vector<uint16_t> k(size_t(n) * d, fp32_to_fp16(1.5f)), v(size_t(n) * d, fp32_to_fp16(-0.25f));
  for (const int bits : {8, 4}) {
    const KvEncoding e = KvEncoding::from_bits(bits);
    const RoundTrip r = round_trip(e, k, v, n, d);
    CHECK(r.k == k);
    CHECK(r.v == v);
  }
  // Each V row's minimum is an f16 the writer keeps as the group's min: decoded exactly.
  const auto vr = gaussian(n, d, 9);
  const RoundTrip r = round_trip(KvEncoding::from_bits(4), vr, vr, n, d);
  for (uint32_t t = 0; t < n; ++t) {
    uint32_t arg = 0;
    for (uint32_t c = 0; c < 32; ++c)
      if (at(vr, d, t, c) < at(vr, d, t, arg)) arg = c;
    CHECK(at(r.v, d, t, arg) == at(vr, d, t, arg));
  }
  std::vector<uint16_t> odd = gaussian(n, d, 3);
  odd[5] = 0x7c00;   // +inf
  odd[70] = 0xfc00;  // -inf
  odd[99] = 0x7e00;  // NaN
  const KvEncoding e = KvEncoding::from_bits(8);
  const RoundTrip o = round_trip(e, odd, odd, n, d);
  for (size_t i = 0; i < o.k.size(); ++i) {
    CHECK(std::isfinite(fp16_to_fp32(o.k[i])));
    CHECK(std::isfinite(fp16_to_fp32(o.v[i])));
  }
  std::vector<uint8_t> a(*kv_layer_block_bytes(e, n, d)), b(a.size());
  kv_quantise_layer(e, vr.data(), odd.data(), n, d, a.data());
  kv_quantise_layer(e, vr.data(), odd.data(), n, d, b.data());
  CHECK(a == b);
}

TEST_CASE("kv quant: bytes per token of SmolLM2-135M's shape (30 layers, kv_dim 192) and Gemma 3 270M's (18, 256)") {
  const KvEncoding f16 = KvEncoding::from_bits(16), q8 = KvEncoding::from_bits(8), q4 = KvEncoding::from_bits(4);
  // f16: K and V, 2 bytes each. q8: 192 codes each, plus per 32-token group 192 (scale, min) f16
  // pairs for K (24 B/token) and per token 6 pairs for V (24 B). q4: 96 bytes of codes each.
  CHECK(kv_bytes_per_token(f16, 30, 192) == 23040.0);
  CHECK(kv_bytes_per_token(q8, 30, 192) == 30 * (2 * 192 + 24 + 24.0));
  CHECK(kv_bytes_per_token(q4, 30, 192) == 30 * (2 * 96 + 24 + 24.0));
  CHECK(kv_bytes_per_token(q4, 18, 256) == 18 * (2 * 128 + 32 + 32.0));
  CHECK(*kv_layer_block_bytes(q4, 33, 48) == 2 * 33 * 24 + 4 * (2 * 48 + 33 * 2));
  CHECK(*kv_layer_block_bytes(q4, 3, 5) == 2 * 3 * 3 + 4 * (5 + 3));  // odd channel count: rows round up
  CHECK_FALSE(kv_layer_block_bytes(q8, uint64_t(1) << 33, 8));
  CHECK(KvEncoding::from_name("q4") == q4);
  CHECK_THROWS_WITH_AS(KvEncoding::from_bits(2), doctest::Contains("expected 16 (f16, as computed), 8 or 4"), Error);
  CHECK_THROWS_AS(KvEncoding::from_name("int4"), Error);
}

TEST_CASE("kv quant: a version-4 chunk file reads back as its decoded KV, from every tier") {
  TempDir tmp("kvq-file");
  const ChunkKvMeta m = meta("c#0", 45);
  const LayerData d(m, 21);
  for (const int bits : {8, 4}) {
    const KvEncoding e = KvEncoding::from_bits(bits);
    const fs::path p = tmp.path / (e.name() + ".rkv");
    write_chunk_kv(p, m, d.kp, d.vp, nullptr, e);
    CHECK(file_version(p) == 4);
    const ChunkKvReader r(p, m);
    CHECK(r.encoding() == e);
    CHECK(r.meta() == m);
    CHECK(r.layer_bytes() == size_t(45) * 48 * 4);
    CHECK(r.stored_layer_bytes() == *kv_layer_block_bytes(e, 45, 48));
    CHECK(r.file_bytes() < uint64_t(r.layer_bytes()) * 3 * (bits == 8 ? 0.6 : 0.4));
    const auto host = HostSegmentKv::load(r);
    std::vector<uint16_t> staging;
    const DiskSegmentKv disk{ChunkKvReader(p, m)};
    for (uint32_t l = 0; l < m.n_layer; ++l) {
      const RoundTrip want = round_trip(e, d.k[l], d.v[l], m.n_tokens, m.kv_dim());
      std::vector<uint16_t> k(want.k.size()), v(want.v.size());
      r.read_layer(int(l), k.data(), v.data());
      CHECK(k == want.k);
      CHECK(v == want.v);
      const HostKvLayer h = host->host_layer(int(l), staging);
      CHECK(std::memcmp(h.k, want.k.data(), want.k.size() * 2) == 0);
      const HostKvLayer dl = disk.host_layer(int(l), staging);
      CHECK(std::memcmp(dl.v, want.v.data(), want.v.size() * 2) == 0);
    }
    CHECK_NOTHROW(r.verify_all_layers());
  }
  // An f16 file is written as before: version 1, 16 + header + 8 + per layer K, V f16 + 8 bytes.
  const fs::path f = tmp.path / "f16.rkv";
  write_chunk_kv(f, m, d.kp, d.vp);
  CHECK(file_version(f) == 1);
  CHECK(ChunkKvReader(f, m).encoding() == KvEncoding{});
  const std::string b = slurp(f);
  uint32_t header_len;
  std::memcpy(&header_len, b.data() + 12, 4);
  CHECK(b.size() == 16 + header_len + 8 + 3 * (45 * 48 * 4 + 8));
  CHECK(b.substr(16 + header_len + 8, 45 * 48 * 2) ==
        std::string(reinterpret_cast<const char*>(d.k[0].data()), 45 * 48 * 2));
}

TEST_CASE("kv quant: truncated, bit-flipped and badly encoded quantised files are refused, never decoded") {
  TempDir tmp("kvq-bad");
  const ChunkKvMeta m = meta("c#1", 40);
  const LayerData d(m, 31);
  const KvEncoding e = KvEncoding::from_bits(4);
  const fs::path good = tmp.path / "good.rkv", p = tmp.path / "c.rkv";
  write_chunk_kv(good, m, d.kp, d.vp, nullptr, e);
  const std::string bytes = slurp(good);
  uint32_t header_len;
  std::memcpy(&header_len, bytes.data() + 12, 4);
  const size_t block = ChunkKvReader(good, m).stored_layer_bytes(), data = 16 + header_len + 8;
  std::vector<uint16_t> k(size_t(40) * 48), v(k.size());

  // Truncated by one byte: refused at open.
  overwrite(p, bytes.substr(0, bytes.size() - 1));
  CHECK_THROWS_WITH_AS(ChunkKvReader(p, m), doctest::Contains("truncated"), CacheFileError);

  // A flipped bit in layer 1's codes, in its scales, and in its checksum: layer 1 fails when read,
  // the others read; verify_all_layers names layer 1.
  for (const size_t at_in_block : {block - 3, size_t(5), block + 2}) {
    std::string b = bytes;
    b[data + (block + 8) + at_in_block] ^= 0x10;
    overwrite(p, b);
    const ChunkKvReader r(p, m);
    CHECK_NOTHROW(r.read_layer(0, k.data(), v.data()));
    CHECK_NOTHROW(r.read_layer(2, k.data(), v.data()));
    CHECK_THROWS_WITH_AS(r.read_layer(1, k.data(), v.data()), doctest::Contains("layer 1 checksum mismatch"), CacheFileError);
    CHECK_THROWS_WITH_AS(r.verify_all_layers(), doctest::Contains("layer 1"), CacheFileError);
    const auto disk = std::make_shared<DiskSegmentKv>(ChunkKvReader(p, m));
    std::vector<uint16_t> staging;
    CHECK_THROWS_AS(disk->host_layer(1, staging), CacheFileError);
    CHECK_THROWS_AS(HostSegmentKv::load(r), CacheFileError);
  }

  // The encoding's bits byte changed: the header checksum fails; changed and re-checksummed (a
  // writer's bug, not a disk's), the encoding itself is refused.
  const size_t bits_at = 16 + header_len - 9;  // u8 bits, u32 k_group, u32 v_group end the header
  CHECK(uint8_t(bytes[bits_at]) == 4);
  std::string b = bytes;
  b[bits_at] = 5;
  overwrite(p, b);
  CHECK_THROWS_WITH_AS(ChunkKvReader(p, m), doctest::Contains("header checksum mismatch"), CacheFileError);
  const uint64_t sum = checksum64(b.data(), 16 + header_len);
  std::memcpy(b.data() + 16 + header_len, &sum, 8);
  overwrite(p, b);
  CHECK_THROWS_WITH_AS(ChunkKvReader(p, m), doctest::Contains("corrupt: KV encoding of 5 bits"), CacheFileError);
}

TEST_CASE("kv quant: a store has one encoding: store.json, --kv-bits mismatch, prefix and exact chains kept f16") {
  TempDir tmp("kvq-store");
  const fs::path dir = tmp.path / "store";
  {
    const KvStore s = KvStore::open_for_write(dir, store_info("q4"));
    CHECK(s.info().dtype == "q4");
    CHECK(s.info().format_version == 2);
    const ChunkKvMeta c = meta("c#0", 40), pre = meta(kPrefixChunkId, 12);
    ChunkKvMeta variant = meta("c#0", 40), chain = meta("c#0", 40);
    variant.context = {"b#0"};
    chain.context = {"b#0"};
    chain.exact_chain = true;
    for (const ChunkKvMeta* m : std::initializer_list<const ChunkKvMeta*>{&c, &pre, &variant, &chain}) {
      const LayerData d(*m, 41);
      s.put(*m, d.kp, d.vp);
      CHECK(s.has_valid(*m));
      CHECK(fs::file_size(s.chunk_path(*m)) > s.kv_bytes(*m));
      CHECK(fs::file_size(s.chunk_path(*m)) < s.kv_bytes(*m) + 400);  // header and checksums
    }
    CHECK(file_version(s.chunk_path(c)) == 4);
    CHECK(file_version(s.chunk_path(variant)) == 4);
    CHECK(file_version(s.chunk_path(pre)) == 1);    // the instruction prefix: f16
    CHECK(file_version(s.chunk_path(chain)) == 3);  // an exact chain node: f16, bit-identical to full
    CHECK(s.kv_bytes(c) == 3 * *kv_layer_block_bytes(KvEncoding::from_bits(4), 40, 48));
    CHECK(s.variants(c).size() == 1);
    CHECK(s.variants(c)[0].encoding().bits == 4);
  }
  const auto j = nlohmann::json::parse(slurp(dir / "store.json"));
  CHECK(j["dtype"] == "q4");
  CHECK(j["format_version"] == 2);
  // Another --kv-bits on this store: a clear error. None (""): the store's own encoding.
  CHECK_THROWS_WITH_AS(KvStore::open_for_write(dir, store_info("f16")),
                       doctest::Contains("holds q4 KV caches (--kv-bits 4), not f16 (--kv-bits 16)"), Error);
  CHECK(KvStore::open_for_write(dir, store_info("")).info().dtype == "q4");
  CHECK(KvStore::open_for_read(dir, "model-q").info().encoding().bits == 4);
  // A new store without --kv-bits: f16, store.json as before (format version 1).
  const KvStore plain = KvStore::open_for_write(tmp.path / "plain", store_info(""));
  CHECK(plain.info().dtype == "f16");
  CHECK(nlohmann::json::parse(slurp(tmp.path / "plain" / "store.json"))["format_version"] == 1);
  // store.json naming an unknown dtype, or a dtype its version cannot hold, is refused.
  auto bad = j;
  bad["dtype"] = "q3";
  overwrite(dir / "store.json", bad.dump());
  CHECK_THROWS_WITH_AS(KvStore::open_for_read(dir, "model-q"), doctest::Contains("KV dtype 'q3'"), Error);
  bad["dtype"] = "q8";
  bad["format_version"] = 1;
  overwrite(dir / "store.json", bad.dump());
  CHECK_THROWS_WITH_AS(KvStore::open_for_read(dir, "model-q"), doctest::Contains("corrupt"), Error);
}
