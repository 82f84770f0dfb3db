// Tests of cuda/quant-dot.cuh, the integer dot products of the CUDA decode GEMV, compiled for the
// host (tests/quant-dot-reference.h mirrors the kernels with them):
//   * the activation blocks equal the CPU backend's quantize_act32 / quantize_act256 (portable and
//     active tables) bit for bit: every q, d, d·Σq and 16-value sum, all-zero blocks and NaN
//     included;
//   * the GEMV's f32 result equals the CPU backend's block8 product within
//     1e-6 · Σ_k |w_k·x_k| + 1e-6 · |cpu| for every type the device keeps quantised, over rows of
//     1 to 34 blocks (lanes left idle, several steps per lane) and 1 to 3 activation rows. The
//     two compute the same integer sums and differ only in how f32 block terms are added
//     (about 1e-8 of that scale here); weights one quant step off move an output by about 1e-3 of
//     that scale, and the last case checks that such a change fails the bound.
// On a GPU, tests/test-cuda-int8-gemv.cpp holds the kernels to these mirrors bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/backend/quant-kernels.h"
#include "core/format/quant.h"
#include "cuda/quant-dot.cuh"
#include "tests/quant-dot-reference.h"

using ragkv::GgmlType;
namespace qt = ragkv::quant_dot;
namespace rt = ragkv::test;

namespace {

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Outputs beyond the bound 1e-6 · Σ|w·x| + 1e-6 · |cpu|.
int count_beyond(const std::vector<float>& got, const std::vector<float>& cpu, const std::vector<float>& scale) {
  int beyond = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - cpu[i]) <= 1e-6f * scale[i] + 1e-6f * std::fabs(cpu[i]))) ++beyond;
  return beyond;
}

}  // namespace

TEST_CASE("quant-dot: activation blocks equal the CPU's quantize_act32 and quantize_act256, bit for bit") {
  const int64_t n = 3, cols = 768;
  auto x = rt::random_activations(size_t(n * cols), 77);
  for (int i = 256; i < 512; ++i) x[size_t(i)] = 0.f;        // an all-zero block of either size
  x[700] = std::numeric_limits<float>::quiet_NaN();         // a NaN becomes -128, its block keeps its scale
  for (int i = 0; i < 32; ++i) x[size_t(cols + i)] *= 1e-30f;  // tiny values
  for (int i = 0; i < 32; ++i) x[size_t(2 * cols + 32 + i)] *= 1e6f;
  for (const ragkv::QuantKernels* k : {&ragkv::quant_kernels_scalar(), &ragkv::quant_kernels()}) {
    CAPTURE(k->name);
    // 32-value blocks with d·Σq.
    const rt::HostActQ8 a32 = rt::quantize_act_q8_host(x.data(), n, cols, 32);
    std::vector<ragkv::ActBlock32> ref32(size_t(n * cols / 32));
    for (int64_t r = 0; r < n; ++r) k->quantize_act32(x.data() + r * cols, ref32.data() + r * (cols / 32), cols);
    int differ = 0;
    for (size_t b = 0; b < ref32.size(); ++b) {
      differ += !same_bits(a32.d[b], ref32[b].d) || !same_bits(a32.dsum[b], ref32[b].dsum);
      for (int i = 0; i < 32; ++i) differ += a32.q[b * 32 + size_t(i)] != ref32[b].q[i];
    }
    CHECK(differ == 0);
    CHECK(a32.q[700] == -128);
    // 256-value blocks with Σq per 16.
    const rt::HostActQ8 a256 = rt::quantize_act_q8_host(x.data(), n, cols, 256);
    std::vector<ragkv::ActBlock256> ref256(size_t(n * cols / 256));
    for (int64_t r = 0; r < n; ++r) k->quantize_act256(x.data() + r * cols, ref256.data() + r * (cols / 256), cols);
    differ = 0;
    for (size_t b = 0; b < ref256.size(); ++b) {
      differ += !same_bits(a256.d[b], ref256[b].d);
      for (int g = 0; g < 16; ++g) differ += a256.bsum[b * 16 + size_t(g)] != ref256[b].bsum[g];
      for (int i = 0; i < 256; ++i) differ += a256.q[b * 256 + size_t(i)] != ref256[b].q[i];
    }
    CHECK(differ == 0);
    CHECK(a256.d[1] == 0.f);  // the all-zero block
  }
}

TEST_CASE("quant-dot: the integer GEMV equals the CPU backend's block8 product within f32 rounding, every type") {
  uint32_t seed = 900;
  for (GgmlType t : kTypes) {
    const std::string type_name = ragkv::ggml_type_name(t);
    CAPTURE(type_name);
    const int block = int(ragkv::ggml_block_elems(t));
    CHECK(block == qt::act_block(t));
    bool handled = false;
    qt::with_lane(t, [&](auto lane) {
      using L = decltype(lane);
      handled = L::kType == t && L::kElems == block && size_t(L::kBytes) == ragkv::ggml_block_bytes(t);
    });
    CHECK(handled);
    // 1, 5 and 34 blocks a row: one lane busy, a few, every lane over two steps (legacy) or more.
    for (int64_t nb : {int64_t(1), int64_t(5), int64_t(34)}) {
      const int64_t cols = nb * block, rows = 7;
      CAPTURE(cols);
      const auto w = rt::random_quant_matrix(t, rows, cols, ++seed);
      for (int64_t n = 1; n <= 3; ++n) {
        CAPTURE(n);
        const auto x = rt::random_activations(size_t(n * cols), ++seed);
        const rt::HostActQ8 a = rt::quantize_act_q8_host(x.data(), n, cols, block);
        const auto got = rt::int8_gemv_host(t, w.data(), rows, cols, a, n);
        const auto cpu = rt::cpu_block8_gemm(t, w.data(), rows, cols, x.data(), n);
        const auto scale = rt::abs_products(t, w.data(), rows, cols, x.data(), n);
        CHECK(count_beyond(got, cpu, scale) == 0);
      }
    }
  }
}

TEST_CASE("quant-dot: a weight one quant step off fails the bound") {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const std::string type_name = ragkv::ggml_type_name(t);
    CAPTURE(type_name);
    const int64_t cols = 4 * ragkv::ggml_block_elems(t), rows = 3;
    auto w = rt::random_quant_matrix(t, rows, cols, 31);
    const auto x = rt::random_activations(size_t(cols), 32);
    const rt::HostActQ8 a = rt::quantize_act_q8_host(x.data(), 1, cols, qt::act_block(t));
    const auto cpu = rt::cpu_block8_gemm(t, w.data(), rows, cols, x.data(), 1);
    const auto scale = rt::abs_products(t, w.data(), rows, cols, x.data(), 1);
    REQUIRE(count_beyond(rt::int8_gemv_host(t, w.data(), rows, cols, a, 1), cpu, scale) == 0);
    // Row 1, second block: the low bit of 16 quant bytes (16 elements of one scale, each one
    // step up or down).
    const size_t at = ragkv::ggml_row_bytes(t, cols) + ragkv::ggml_block_bytes(t) +
                      (t == GgmlType::Q4_0 ? 2 : t == GgmlType::Q4_K ? 16 : 0);
    for (size_t i = 0; i < 16; ++i) w[at + i] ^= 1;
    CHECK(count_beyond(rt::int8_gemv_host(t, w.data(), rows, cols, a, 1), cpu, scale) >= 1);
  }
}
