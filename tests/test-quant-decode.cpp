// Tests of cuda/quant-decode.cuh, the block decoders the CUDA kernels use to read weights that
// stay quantised on the device, compiled here for the host: every element of random blocks (any
// bits, scales included: subnormal, infinite and NaN f16 fields too) equals core/format/quant's
// dequantize_row — the CPU backend's values — bit for bit (a NaN as a NaN). On a GPU the same functions run in
// the kernels (tests/test-cuda-ops.cpp checks those against the CPU backend).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/format/quant.h"
#include "cuda/quant-decode.cuh"

using ragkv::GgmlType;
namespace qd = ragkv::quant_decode;

namespace {

const GgmlType kDecodable[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                               GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

// The first element where a and b differ, or -1: bits equal, or both NaN (a NaN's sign and
// payload depend on how fma was compiled, and load_weight refuses NaN weights anyway).
int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return int64_t(i);
  return -1;
}

}  // namespace

TEST_CASE("quant-decode: every element of random blocks equals dequantize_row, bit for bit (NaN as NaN)") {
  std::mt19937 rng(4242);
  for (GgmlType t : kDecodable) {
    const std::string type_name = ragkv::ggml_type_name(t);
    CAPTURE(type_name);
    const bool handled = qd::with_block(t, [&](auto block) {
      using B = decltype(block);
      CHECK(B::kElems == ragkv::ggml_block_elems(t));
      CHECK(size_t(B::kBytes) == ragkv::ggml_block_bytes(t));
      const int n_blocks = 64;
      std::vector<uint8_t> bytes(size_t(n_blocks) * B::kBytes);
      for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
      std::vector<float> ref(size_t(n_blocks) * B::kElems);
      ragkv::dequantize_row(t, bytes.data(), ref.data(), int64_t(ref.size()));
      std::vector<float> got(ref.size());
      for (int blk = 0; blk < n_blocks; ++blk)
        for (int e0 = 0; e0 < B::kElems; e0 += 8)
          B::decode8(bytes.data() + size_t(blk) * B::kBytes, e0, got.data() + size_t(blk) * B::kElems + e0);
      const int64_t at = first_difference(got, ref);
      CAPTURE(at);
      if (at >= 0) {
        CAPTURE(got[size_t(at)]);
        CAPTURE(ref[size_t(at)]);
        CHECK(at == -1);
      }
    });
    CHECK(handled);
    CHECK(qd::device_decodable(t));
  }
}

TEST_CASE("quant-decode: the plain float and unsupported types are not decodable") {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::Q8_K, GgmlType::IQ4_NL}) {
    const std::string type_name = ragkv::ggml_type_name(t);
    CAPTURE(type_name);
    CHECK_FALSE(qd::device_decodable(t));
    bool called = false;
    CHECK_FALSE(qd::with_block(t, [&](auto) { called = true; }));
    CHECK_FALSE(called);
  }
}
