// The CUDA decode GEMV on 8-bit activation blocks (cuda/int8-gemv.cu) on a GPU:
//   * its activation blocks (q, d, d·Σq, Σq per 16) and its outputs equal the host mirrors of
//     tests/quant-dot-reference.h bit for bit — the same integer sums, the same f32 operations in
//     the same order (explicit fma on both sides), bias added as the kernel adds it — for every
//     type the device keeps quantised, rows of 1 to 34 blocks, 1 to 8 activation rows, the rows
//     in one buffer or as three parts of a stack in buffers and outputs of their own;
//   * through the backend, a decode step's products (Activations::block8) on a stack of Q4_K,
//     Q4_K, Q6_K and Q8_0 parts (both activation block sizes, three parts in one launch) equal the CPU backend's block8 products
//     within tests/test-quant-dot.cpp's bound (1e-6 · Σ|w·x| + 1e-6 · |cpu|): the mirrors meet it
//     against the CPU's portable table there, the CPU backend here adds in its SIMD order.
// Without a GPU each case says it is skipped and returns.
#ifdef RAGKV_HAVE_CUDA

#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/format/gguf.h"
#include "core/format/quant.h"
#include "cuda/cuda-backend.h"
#include "cuda/int8-gemv.cuh"
#include "tests/cuda-device-buffer.h"
#include "tests/gguf-matrix-tensor.h"
#include "tests/quant-dot-reference.h"

namespace {

using ragkv::GgmlType;
namespace qt = ragkv::quant_dot;
namespace rt = ragkv::test;
using ragkv::test::DeviceBuffer;

bool gpu_missing() {
  if (ragkv::cuda_device_present()) return false;
  MESSAGE("skipped: no CUDA GPU is present on this machine");
  return true;
}

template <typename T>
std::vector<T> download(const T* device, size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// Elements whose bits differ.
template <typename T>
int count_different(const std::vector<T>& a, const std::vector<T>& b) {
  REQUIRE(a.size() == b.size());
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(T)) != 0;
  return differ;
}

using ragkv::test::matrix_tensor;

}  // namespace

TEST_CASE("cuda: int8 GEMV and its activation blocks equal the host mirrors bit for bit, every type") {
  if (gpu_missing()) return;
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  uint32_t seed = 5100;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    const std::string type_name = ragkv::ggml_type_name(t);
    CAPTURE(type_name);
    const int block = qt::act_block(t);
    for (int64_t nb : {int64_t(1), int64_t(5), int64_t(34)}) {
      const int64_t cols = nb * block, rows = 37;  // rows: not a multiple of the kernel's four per block
      CAPTURE(cols);
      const auto w = rt::random_quant_matrix(t, rows, cols, ++seed);
      DeviceBuffer dw(w);
      std::vector<float> bias = rt::random_activations(size_t(rows), ++seed);
      DeviceBuffer dbias(bias);
      for (int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(8)}) {
        CAPTURE(n);
        auto x = rt::random_activations(size_t(n * cols), ++seed);
        if (nb > 1)
          for (int i = 0; i < block; ++i) x[size_t(block + i)] = 0.f;  // an all-zero block
        DeviceBuffer dx(x);
        DeviceBuffer work(ragkv::act_q8_bytes(block, n, cols));
        const qt::ActQ8 a = ragkv::quantize_act_q8_cuda(dx.as<float>(), n, cols, block, work.as<void>(), stream);
        const rt::HostActQ8 ha = rt::quantize_act_q8_host(x.data(), n, cols, block);
        REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
        CHECK(count_different(download(a.q, ha.q.size()), ha.q) == 0);
        CHECK(count_different(download(a.d, ha.d.size()), ha.d) == 0);
        if (block == 32) CHECK(count_different(download(a.dsum, ha.dsum.size()), ha.dsum) == 0);
        else CHECK(count_different(download(a.bsum, ha.bsum.size()), ha.bsum) == 0);

        const auto expect = rt::int8_gemv_host(t, w.data(), rows, cols, ha, n);
        for (bool with_bias : {false, true}) {
          CAPTURE(with_bias);
          DeviceBuffer dy(size_t(n * rows) * sizeof(float));
          ragkv::GemvOutputs out;
          out.first[1] = rows;
          out.y[0] = dy.as<float>();
          out.ld[0] = rows;
          out.bias[0] = with_bias ? dbias.as<float>() : nullptr;
          ragkv::GemvWeights gw;
          gw.part[0] = dw.as<uint8_t>();
          ragkv::int8_gemv_cuda(t, gw, cols, a, n, out, stream);
          REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
          auto want = expect;
          if (with_bias)
            for (int64_t r = 0; r < n; ++r)
              for (int64_t o = 0; o < rows; ++o) want[size_t(r * rows + o)] += bias[size_t(o)];
          CHECK(count_different(download(dy.as<float>(), want.size()), want) == 0);
        }
        {  // The same rows as three parts in buffers and outputs of their own, one launch.
          const size_t row_bytes = ragkv::ggml_row_bytes(t, cols);
          const int64_t split_at[4] = {0, 5, 20, rows};
          std::vector<std::unique_ptr<DeviceBuffer>> pw, py;
          ragkv::GemvWeights gw;
          ragkv::GemvOutputs out;
          out.parts = 3;
          for (int p = 0; p < 3; ++p) {
            const int64_t pr = split_at[p + 1] - split_at[p];
            pw.push_back(std::make_unique<DeviceBuffer>(std::vector<uint8_t>(
                w.begin() + ptrdiff_t(size_t(split_at[p]) * row_bytes), w.begin() + ptrdiff_t(size_t(split_at[p + 1]) * row_bytes))));
            py.push_back(std::make_unique<DeviceBuffer>(size_t(n * pr) * sizeof(float)));
            gw.part[p] = pw.back()->as<uint8_t>();
            out.first[p + 1] = split_at[p + 1];
            out.y[p] = py.back()->as<float>();
            out.ld[p] = pr;
          }
          ragkv::int8_gemv_cuda(t, gw, cols, a, n, out, stream);
          REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
          for (int p = 0; p < 3; ++p) {
            const int64_t pr = split_at[p + 1] - split_at[p];
            const auto got = download(py[size_t(p)]->as<float>(), size_t(n * pr));
            std::vector<float> part_want;
            for (int64_t r = 0; r < n; ++r)
              for (int64_t o = split_at[p]; o < split_at[p + 1]; ++o) part_want.push_back(expect[size_t(r * rows + o)]);
            CHECK(count_different(got, part_want) == 0);
          }
        }
      }
    }
  }
  cudaStreamDestroy(stream);
}

TEST_CASE("cuda: a decode step's products (block8) on a Q4_K/Q4_K/Q6_K/Q8_0 stack equal the CPU's within f32 rounding") {
  if (gpu_missing()) return;
  auto cpu = ragkv::make_cpu_backend(1);
  auto gpu = ragkv::make_cuda_backend(0);
  const int64_t in = 1024;
  // Q and K of one type (one launch), V of another, then a legacy type (the other block size).
  const GgmlType types[] = {GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q8_0};
  const int64_t part_rows[] = {96, 32, 33, 40};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<ragkv::GgufTensor> tensors;
  for (size_t p = 0; p < 4; ++p) bytes.push_back(rt::random_quant_matrix(types[p], part_rows[p], in, 6100 + uint32_t(p)));
  for (size_t p = 0; p < 4; ++p)
    tensors.push_back(matrix_tensor("blk.0.part" + std::to_string(p), types[p], part_rows[p], in, bytes[p]));
  const ragkv::GgufTensor* ptrs[] = {&tensors[0], &tensors[1], &tensors[2], &tensors[3]};
  auto w_cpu = cpu->load_weight_stack(ptrs, "blk.0.attn_qkv");
  auto w_gpu = gpu->load_weight_stack(ptrs, "blk.0.attn_qkv");
  for (int64_t n : {int64_t(1), int64_t(4)}) {
    CAPTURE(n);
    const auto x = rt::random_activations(size_t(n * in), 6200 + uint32_t(n));
    std::vector<std::vector<float>> got(4), want(4);
    for (ragkv::Backend* be : {cpu.get(), gpu.get()}) {
      const ragkv::Tensor tx = be->alloc(ragkv::DType::f32, n, in);
      be->upload(tx, x.data());
      std::vector<ragkv::Tensor> outs;
      for (size_t p = 0; p < 4; ++p) outs.push_back(be->alloc(ragkv::DType::f32, n, part_rows[p]));
      be->matmul_parts(tx, be == cpu.get() ? *w_cpu : *w_gpu, outs, {}, ragkv::Activations::block8);
      for (size_t p = 0; p < 4; ++p) {
        auto& dst = be == cpu.get() ? want[p] : got[p];
        dst.resize(size_t(n * part_rows[p]));
        be->download(outs[p], dst.data());
      }
    }
    for (size_t p = 0; p < 4; ++p) {
      CAPTURE(p);
      const auto scale = rt::abs_products(types[p], bytes[p].data(), part_rows[p], in, x.data(), n);
      int beyond = 0;
      for (size_t i = 0; i < got[p].size(); ++i)
        if (!(std::fabs(got[p][i] - want[p][i]) <= 1e-6f * scale[i] + 1e-6f * std::fabs(want[p][i]))) ++beyond;
      CHECK(beyond == 0);
    }
  }
}

// A stack of Q4_K or Q5_K parts then Q6_K ones (the K-quant mixes' Q, K, then V) takes one launch
// (int8_gemv_pair_cuda): each part's rows must be those of the part loaded as a weight of its own
// and multiplied alone (one type per launch), bit for bit, for 1 to 8 rows and both first types,
// into the parts' own outputs and, multiplied whole, into the columns of one output.
TEST_CASE("cuda: a Q4_K/Q5_K then Q6_K stack in one launch equals its parts multiplied alone, bit for bit") {
  if (gpu_missing()) return;
  auto gpu = ragkv::make_cuda_backend(0);
  const int64_t in = 512;
  for (const GgmlType first : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    const std::string type_name = ragkv::ggml_type_name(first);
    CAPTURE(type_name);
    const GgmlType types[] = {first, first, GgmlType::Q6_K};
    const int64_t part_rows[] = {64, 16, 16};
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<ragkv::GgufTensor> tensors;
    for (size_t p = 0; p < 3; ++p) bytes.push_back(rt::random_quant_matrix(types[p], part_rows[p], in, 6300 + uint32_t(p)));
    for (size_t p = 0; p < 3; ++p)
      tensors.push_back(matrix_tensor("blk.0.part" + std::to_string(p), types[p], part_rows[p], in, bytes[p]));
    const ragkv::GgufTensor* ptrs[] = {&tensors[0], &tensors[1], &tensors[2]};
    auto stack = gpu->load_weight_stack(ptrs, "blk.0.attn_qkv");
    std::vector<std::unique_ptr<ragkv::Weight>> alone;
    for (size_t p = 0; p < 3; ++p) alone.push_back(gpu->load_weight(tensors[p]));
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(8)}) {
      CAPTURE(n);
      const auto x = rt::random_activations(size_t(n * in), 6400 + uint32_t(n));
      const ragkv::Tensor tx = gpu->alloc(ragkv::DType::f32, n, in);
      gpu->upload(tx, x.data());
      std::vector<ragkv::Tensor> outs;
      for (size_t p = 0; p < 3; ++p) outs.push_back(gpu->alloc(ragkv::DType::f32, n, part_rows[p]));
      gpu->matmul_parts(tx, *stack, outs, {}, ragkv::Activations::block8);
      for (size_t p = 0; p < 3; ++p) {
        CAPTURE(p);
        const ragkv::Tensor y = gpu->alloc(ragkv::DType::f32, n, part_rows[p]);
        gpu->matmul(tx, *alone[p], y, nullptr, ragkv::Activations::block8);
        std::vector<float> together(size_t(n * part_rows[p])), apart(together.size());
        gpu->download(outs[p], together.data());
        gpu->download(y, apart.data());
        CHECK(together == apart);
        // The stack multiplied whole: the part's columns of the one output.
        const ragkv::Tensor whole = gpu->alloc(ragkv::DType::f32, n, stack->out_features);
        gpu->matmul(tx, *stack, whole, nullptr, ragkv::Activations::block8);
        std::vector<float> all(size_t(n * stack->out_features));
        gpu->download(whole, all.data());
        int64_t first = 0;
        for (size_t q = 0; q < p; ++q) first += part_rows[q];
        for (int64_t r = 0; r < n; ++r)
          for (int64_t c = 0; c < part_rows[p]; ++c)
            CHECK(all[size_t(r * stack->out_features + first + c)] == apart[size_t(r * part_rows[p] + c)]);
      }
    }
  }
}

#endif  // RAGKV_HAVE_CUDA
