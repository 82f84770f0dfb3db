// Tests of core/format/quant (type geometry, dequantisation against gguf-py golden values) and of the
// fp16/bf16 conversions in core/format/fp16.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "core/util/error.h"
#include "core/format/fp16.h"
#include "core/format/quant.h"
#include "tests/test-paths.h"

namespace {

using ragkv::GgmlType;

// One record of testdata/quant_golden.bin (format: testdata/make_quant_fixtures.py).
struct GoldenRecord {
  GgmlType type;
  int64_t n_elems = 0;
  std::string label;
  std::vector<uint8_t> raw;
  std::vector<float> ref;
};

class Reader {
 public:
  explicit Reader(std::vector<uint8_t> data) : data_(std::move(data)) {}
  uint32_t u32() {
    uint32_t v;
    bytes(&v, 4);
    return v;
  }
  void bytes(void* dst, size_t n) {
    REQUIRE(pos_ + n <= data_.size());
    std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
  }
  bool at_end() const { return pos_ == data_.size(); }

 private:
  std::vector<uint8_t> data_;
  size_t pos_ = 0;
};

std::vector<GoldenRecord> load_golden() {
  const auto path = ragkv::test::testdata("quant_golden.bin");
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path.string());
  Reader r(std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {}));
  char magic[4];
  r.bytes(magic, 4);
  REQUIRE(std::memcmp(magic, "RKQG", 4) == 0);
  REQUIRE(r.u32() == 1);
  const uint32_t n = r.u32();
  std::vector<GoldenRecord> recs(n);
  for (auto& rec : recs) {
    rec.type = static_cast<GgmlType>(r.u32());
    rec.n_elems = r.u32();
    rec.raw.resize(r.u32());
    rec.label.resize(r.u32());
    r.bytes(rec.label.data(), rec.label.size());
    r.bytes(rec.raw.data(), rec.raw.size());
    rec.ref.resize(static_cast<size_t>(rec.n_elems));
    r.bytes(rec.ref.data(), rec.ref.size() * sizeof(float));
  }
  REQUIRE(r.at_end());
  return recs;
}

// |got - ref| within 1e-6 of |ref|, with a floor of 1e-6 of the block's largest magnitude (so a
// value that cancels to ~0 in d*q - m is not held to a tighter bound than the block's precision).
void check_close(const GoldenRecord& rec, const std::vector<float>& got) {
  const int64_t be = ragkv::ggml_block_elems(rec.type);
  int64_t mismatches = 0;
  for (int64_t b = 0; b < rec.n_elems; b += be) {
    float block_max = 0.0f;
    for (int64_t i = b; i < b + be; ++i) {
      if (std::isfinite(rec.ref[i])) block_max = std::max(block_max, std::fabs(rec.ref[i]));
    }
    for (int64_t i = b; i < b + be; ++i) {
      const float g = got[i], e = rec.ref[i];
      bool ok;
      if (!std::isfinite(e)) {
        ok = g == e;  // +-inf must match exactly
      } else {
        const float tol = 1e-6f * std::max(std::fabs(e), block_max);
        ok = std::isfinite(g) && std::fabs(g - e) <= tol;
      }
      if (!ok && ++mismatches <= 5) {
        FAIL_CHECK(rec.label << ": element " << i << " got " << g << " expected " << e);
      }
    }
  }
  CHECK_MESSAGE(mismatches == 0, rec.label << ": " << mismatches << " mismatches");
}

}  // namespace

TEST_CASE("quant: dequantize_row matches gguf-py golden values") {
  const auto recs = load_golden();
  std::map<GgmlType, int> per_type;
  for (const auto& rec : recs) {
    CAPTURE(rec.label);
    REQUIRE(ragkv::ggml_type_supported(rec.type));
    REQUIRE(ragkv::ggml_row_bytes(rec.type, rec.n_elems) == rec.raw.size());
    std::vector<float> got(static_cast<size_t>(rec.n_elems), NAN);
    ragkv::dequantize_row(rec.type, rec.raw.data(), got.data(), rec.n_elems);
    check_close(rec, got);

    // The same blocks read from an odd address (blocks in a GGUF file need not be aligned).
    std::vector<uint8_t> shifted(rec.raw.size() + 1);
    std::memcpy(shifted.data() + 1, rec.raw.data(), rec.raw.size());
    std::vector<float> got2(static_cast<size_t>(rec.n_elems), NAN);
    ragkv::dequantize_row(rec.type, shifted.data() + 1, got2.data(), rec.n_elems);
    CHECK(std::memcmp(got.data(), got2.data(), got.size() * sizeof(float)) == 0);
    per_type[rec.type]++;
  }
  // Every supported type is covered by the fixture.
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0,
                     GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K}) {
    CAPTURE(ragkv::ggml_type_name(t));
    CHECK(per_type[t] >= 1);
  }
}

TEST_CASE("quant: block geometry and names") {
  struct Geo {
    GgmlType t;
    const char* name;
    int64_t elems;
    size_t bytes;
  };
  const Geo geos[] = {
      {GgmlType::F32, "F32", 1, 4},       {GgmlType::F16, "F16", 1, 2},
      {GgmlType::BF16, "BF16", 1, 2},     {GgmlType::Q4_0, "Q4_0", 32, 18},
      {GgmlType::Q4_1, "Q4_1", 32, 20},   {GgmlType::Q5_0, "Q5_0", 32, 22},
      {GgmlType::Q5_1, "Q5_1", 32, 24},   {GgmlType::Q8_0, "Q8_0", 32, 34},
      {GgmlType::Q4_K, "Q4_K", 256, 144}, {GgmlType::Q5_K, "Q5_K", 256, 176},
      {GgmlType::Q6_K, "Q6_K", 256, 210},
  };
  for (const auto& g : geos) {
    CAPTURE(g.name);
    CHECK(std::string(ragkv::ggml_type_name(g.t)) == g.name);
    CHECK(ragkv::ggml_type_supported(g.t));
    CHECK(ragkv::ggml_block_elems(g.t) == g.elems);
    CHECK(ragkv::ggml_block_bytes(g.t) == g.bytes);
    CHECK(ragkv::ggml_row_bytes(g.t, 0) == 0);
    CHECK(ragkv::ggml_row_bytes(g.t, 3 * g.elems) == 3 * g.bytes);
  }
  // Known but unsupported types have names and geometry too.
  CHECK(std::string(ragkv::ggml_type_name(GgmlType::IQ2_XS)) == "IQ2_XS");
  CHECK(std::string(ragkv::ggml_type_name(GgmlType::Q2_K)) == "Q2_K");
  CHECK(std::string(ragkv::ggml_type_name(GgmlType::MXFP4)) == "MXFP4");
  CHECK(ragkv::ggml_block_bytes(GgmlType::Q2_K) == 84);
  CHECK(ragkv::ggml_block_elems(GgmlType::IQ2_XS) == 256);
  CHECK_FALSE(ragkv::ggml_type_supported(GgmlType::Q2_K));
  CHECK_FALSE(ragkv::ggml_type_supported(GgmlType::IQ2_XS));
  // Numbers ggml does not define.
  CHECK(std::string(ragkv::ggml_type_name(static_cast<GgmlType>(4))) == "type4");
  CHECK(std::string(ragkv::ggml_type_name(static_cast<GgmlType>(1000))) == "type1000");
  CHECK_FALSE(ragkv::ggml_type_supported(static_cast<GgmlType>(4)));
  CHECK_THROWS_AS(ragkv::ggml_block_elems(static_cast<GgmlType>(4)), ragkv::Error);
  CHECK_THROWS_AS(ragkv::ggml_block_bytes(static_cast<GgmlType>(1000)), ragkv::Error);
}

TEST_CASE("quant: unsupported types and bad row lengths throw") {
  std::vector<uint8_t> src(4096, 0);
  std::vector<float> dst(1024);
  for (GgmlType t : {GgmlType::IQ2_XS, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL}) {
    const std::string name = ragkv::ggml_type_name(t);
    CAPTURE(name);
    try {
      ragkv::dequantize_row(t, src.data(), dst.data(), 256);
      FAIL("no exception for " << name);
    } catch (const ragkv::Error& e) {
      CHECK(std::string(e.what()).find(name) != std::string::npos);
      CHECK(std::string(e.what()).find("Q4_K") != std::string::npos);  // lists what is supported
    }
  }
  try {
    ragkv::dequantize_row(static_cast<GgmlType>(4), src.data(), dst.data(), 32);
    FAIL("no exception for type4");
  } catch (const ragkv::Error& e) {
    CHECK(std::string(e.what()).find("type4") != std::string::npos);
  }

  CHECK_THROWS_AS(ragkv::ggml_row_bytes(GgmlType::Q4_K, 100), ragkv::Error);
  CHECK_THROWS_AS(ragkv::ggml_row_bytes(GgmlType::Q8_0, 33), ragkv::Error);
  CHECK_THROWS_AS(ragkv::ggml_row_bytes(GgmlType::Q8_0, -32), ragkv::Error);
  CHECK_THROWS_AS(ragkv::dequantize_row(GgmlType::Q4_0, src.data(), dst.data(), 48), ragkv::Error);
  CHECK_THROWS_AS(ragkv::dequantize_row(GgmlType::Q6_K, src.data(), dst.data(), 255), ragkv::Error);
  CHECK(ragkv::ggml_row_bytes(GgmlType::F16, 7) == 14);
}

TEST_CASE("fp16: scalar conversions") {
  SUBCASE("every non-NaN f16 round-trips through f32") {
    int checked = 0;
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const bool is_nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff) != 0;
      const float f = ragkv::fp16_to_fp32(static_cast<ragkv::f16_t>(h));
      if (is_nan) {
        CHECK(std::isnan(f));
        continue;
      }
      const ragkv::f16_t back = ragkv::fp32_to_fp16(f);
      if (back != h) FAIL_CHECK("f16 0x" << std::hex << h << " -> " << f << " -> 0x" << back);
      ++checked;
    }
    CHECK(checked == 65536 - 2 * 1023);
  }
  SUBCASE("known values") {
    CHECK(ragkv::fp16_to_fp32(0x3c00) == 1.0f);
    CHECK(ragkv::fp16_to_fp32(0xc000) == -2.0f);
    CHECK(ragkv::fp16_to_fp32(0x7bff) == 65504.0f);
    CHECK(ragkv::fp16_to_fp32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(std::isinf(ragkv::fp16_to_fp32(0x7c00)));
    CHECK(std::signbit(ragkv::fp16_to_fp32(0x8000)));
  }
  SUBCASE("fp32_to_fp16 rounds to nearest even") {
    const float ulp1 = std::ldexp(1.0f, -10);  // f16 spacing in [1, 2)
    CHECK(ragkv::fp32_to_fp16(1.0f + ulp1 / 2) == 0x3c00);                    // tie -> even (down)
    CHECK(ragkv::fp32_to_fp16(1.0f + 3 * ulp1 / 2) == 0x3c02);                // tie -> even (up)
    CHECK(ragkv::fp32_to_fp16(1.0f + ulp1 / 2 + std::ldexp(1.0f, -20)) == 0x3c01);  // above tie
    CHECK(ragkv::fp32_to_fp16(1.0f + ulp1 / 2 - std::ldexp(1.0f, -20)) == 0x3c00);  // below tie
    CHECK(ragkv::fp32_to_fp16(-(1.0f + 3 * ulp1 / 2)) == 0xbc02);
    CHECK(ragkv::fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(ragkv::fp32_to_fp16(65519.0f) == 0x7bff);  // below the overflow threshold
    CHECK(ragkv::fp32_to_fp16(65520.0f) == 0x7c00);  // tie at max -> rounds to inf
    CHECK(ragkv::fp32_to_fp16(1e9f) == 0x7c00);
    // subnormals: smallest is 2^-24; half of it is a tie that rounds to even (zero).
    CHECK(ragkv::fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);
    CHECK(ragkv::fp32_to_fp16(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(ragkv::fp32_to_fp16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 * 2^-24: tie -> even
    CHECK(ragkv::fp32_to_fp16(std::ldexp(1.0f, -30)) == 0x0000);
    CHECK(ragkv::fp32_to_fp16(-std::ldexp(1.0f, -30)) == 0x8000);
    CHECK(std::isnan(ragkv::fp16_to_fp32(ragkv::fp32_to_fp16(NAN))));
  }
  SUBCASE("bf16") {
    CHECK(ragkv::bf16_to_fp32(0x3f80) == 1.0f);
    CHECK(ragkv::fp32_to_bf16(1.0f) == 0x3f80);
    const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
    CHECK(ragkv::fp32_to_bf16(1.0f + ulp / 2) == 0x3f80);      // tie -> even (down)
    CHECK(ragkv::fp32_to_bf16(1.0f + 3 * ulp / 2) == 0x3f82);  // tie -> even (up)
    CHECK(ragkv::fp32_to_bf16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)) == 0x3f81);
    for (uint32_t h = 0; h < 0x10000; ++h) {
      const float f = ragkv::bf16_to_fp32(static_cast<ragkv::bf16_t>(h));
      if (std::isnan(f)) continue;
      if (ragkv::fp32_to_bf16(f) != h) FAIL_CHECK("bf16 0x" << std::hex << h << " does not round-trip");
    }
    CHECK(std::isnan(ragkv::bf16_to_fp32(ragkv::fp32_to_bf16(NAN))));
  }
}

TEST_CASE("fp16: row conversions equal the scalar ones") {
  const int64_t n = 1003;  // odd: exercises the vector body and the scalar tail
  std::vector<ragkv::f16_t> h(n);
  std::vector<float> f(n);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    do {
      bits = static_cast<uint16_t>(next());
    } while (((bits >> 10) & 0x1f) == 0x1f && (bits & 0x3ff) != 0);  // no NaN
    h[i] = bits;
    // f32 inputs covering normal, subnormal-in-f16, overflowing and tie cases.
    const float mag = std::ldexp(static_cast<float>(next() & 0xffff) / 65536.0f + 1.0f,
                                 static_cast<int>(next() % 48) - 30);
    f[i] = (next() & 1) ? -mag : mag;
  }
  f[0] = 1.0f + std::ldexp(1.0f, -11);  // ties
  f[1] = 1.0f + 3 * std::ldexp(1.0f, -11);
  f[2] = 65520.0f;
  f[3] = std::ldexp(1.0f, -25);

  std::vector<float> got_f(n);
  ragkv::fp16_to_fp32_row(h.data(), got_f.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const float want = ragkv::fp16_to_fp32(h[i]);
    if (std::memcmp(&got_f[i], &want, 4) != 0) FAIL_CHECK("fp16_to_fp32_row differs at " << i);
  }
  std::vector<ragkv::f16_t> got_h(n);
  ragkv::fp32_to_fp16_row(f.data(), got_h.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    if (got_h[i] != ragkv::fp32_to_fp16(f[i])) {
      FAIL_CHECK("fp32_to_fp16_row differs at " << i << " for " << f[i]);
    }
  }
}
