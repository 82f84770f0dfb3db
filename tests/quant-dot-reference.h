// Host mirrors of the CUDA decode GEMV on 8-bit activation blocks (cuda/int8-gemv.cu), built from
// the same quant-dot.cuh functions, and the CPU backend's block8 products to hold them against:
// tests/test-quant-dot.cpp compares the mirrors with the CPU on every machine; on a GPU,
// tests/test-cuda-int8-gemv.cpp compares the kernels with the mirrors bit for bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/backend/quant-kernels.h"
#include "core/format/fp16.h"
#include "core/format/quant.h"
#include "cuda/quant-dot.cuh"

namespace ragkv::test {

// GGUF blocks of a [rows][cols] matrix of type t: random quants (any bits) under small random
// f16 scales and mins, as a model file holds (values up to about 16).
inline std::vector<uint8_t> random_quant_matrix(GgmlType t, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(ggml_row_bytes(t, cols) * static_cast<size_t>(rows));
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  struct Field {
    size_t offset;
    float lo, hi;
  };
  std::vector<Field> fields;
  switch (t) {
    case GgmlType::Q4_1:
    case GgmlType::Q5_1: fields = {{0, 1e-3f, 4e-3f}, {2, -0.05f, 0.05f}}; break;
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: fields = {{0, 1e-3f, 4e-3f}, {2, 1e-3f, 4e-3f}}; break;
    case GgmlType::Q6_K: fields = {{208, 1e-3f, 4e-3f}}; break;
    default: fields = {{0, 1e-3f, 4e-3f}}; break;  // Q4_0, Q5_0, Q8_0
  }
  const size_t block = ggml_block_bytes(t);
  for (size_t off = 0; off < bytes.size(); off += block)
    for (const Field& f : fields) {
      const uint16_t h = fp32_to_fp16(std::uniform_real_distribution<float>(f.lo, f.hi)(rng));
      std::memcpy(bytes.data() + off + f.offset, &h, 2);
    }
  return bytes;
}

// n activations, uniform in [-2, 2].
inline std::vector<float> random_activations(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The activation blocks of n rows in the device layout (quant-dot.cuh), on the host.
struct HostActQ8 {
  std::vector<int8_t> q;
  std::vector<float> d, dsum;
  std::vector<int16_t> bsum;
  int64_t cols = 0;
  int block = 32;
  quant_dot::ActQ8 view() const {
    quant_dot::ActQ8 a;
    a.q = q.data();
    a.d = d.data();
    a.dsum = block == 32 ? dsum.data() : nullptr;
    a.bsum = block == 256 ? bsum.data() : nullptr;
    a.cols = cols;
    return a;
  }
};

// What int8-gemv.cu's quantize_act kernel computes: per block the largest |x|, then the same
// act_scale and act_round, and the integer sums.
inline HostActQ8 quantize_act_q8_host(const float* x, int64_t n, int64_t cols, int block) {
  HostActQ8 a;
  a.cols = cols;
  a.block = block;
  const int64_t blocks = n * cols / block;
  a.q.resize(size_t(n * cols));
  a.d.resize(size_t(blocks));
  if (block == 32) a.dsum.resize(size_t(blocks));
  else a.bsum.resize(size_t(n * cols / 16));
  for (int64_t b = 0; b < blocks; ++b) {
    const float* xb = x + b * block;
    float amax = 0.f;
    for (int i = 0; i < block; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    float d, id;
    quant_dot::act_scale(amax, &d, &id);
    int sum = 0, sum16 = 0;
    for (int i = 0; i < block; ++i) {
      const int8_t q = quant_dot::act_round(xb[i] * id);
      a.q[size_t(b * block + i)] = q;
      sum += q;
      sum16 += q;
      if (block == 256 && i % 16 == 15) {
        a.bsum[size_t(b * 16 + i / 16)] = static_cast<int16_t>(sum16);
        sum16 = 0;
      }
    }
    a.d[size_t(b)] = d;
    if (block == 32) a.dsum[size_t(b)] = d * float(sum);
  }
  return a;
}

// What int8-gemv.cu's GEMV kernel computes for y [n][rows] (row stride rows): each of a warp's 32
// lanes adds its blocks' terms in the kernel's order, then the butterfly shuffles add the lanes.
inline std::vector<float> int8_gemv_host(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols,
                                         const HostActQ8& acts, int64_t n) {
  std::vector<float> y(size_t(n * rows));
  const quant_dot::ActQ8 a = acts.view();
  quant_dot::with_lane(t, [&](auto lane_type) {
    using L = decltype(lane_type);
    const int64_t nb = cols / L::kElems;
    const size_t row_bytes = size_t(nb) * L::kBytes;
    for (int64_t o = 0; o < rows; ++o) {
      const uint8_t* wr = w + size_t(o) * row_bytes;
      for (int64_t r = 0; r < n; ++r) {
        float lanes[32];
        for (int lane = 0; lane < 32; ++lane) {
          const int part = lane % L::kLanes;
          float acc = 0.f;
          for (int64_t b = lane / L::kLanes; b < nb; b += 32 / L::kLanes)
            acc += L::dot(L::load(wr + b * L::kBytes, part), part, a, r, b);
          lanes[lane] = acc;
        }
        for (int offset = 16; offset > 0; offset >>= 1) {
          float next[32];
          for (int lane = 0; lane < 32; ++lane) next[lane] = lanes[lane] + lanes[lane ^ offset];
          std::memcpy(lanes, next, sizeof lanes);
        }
        y[size_t(r * rows + o)] = lanes[0];
      }
    }
  });
  return y;
}

// The CPU backend's block8 product (its portable table) for y [n][rows]: x quantised by the CPU's
// own quantize_act32 / quantize_act256, each weight row against it.
inline std::vector<float> cpu_block8_gemm(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                                          int64_t n) {
  const QuantKernels& k = quant_kernels_scalar();
  const ActFormat f = act_format(t);
  const size_t act_bytes = act_row_bytes(f, cols);
  std::vector<uint8_t> acts(act_bytes * size_t(n));
  for (int64_t r = 0; r < n; ++r) {
    if (f == ActFormat::q8_32)
      k.quantize_act32(x + r * cols, reinterpret_cast<ActBlock32*>(acts.data() + size_t(r) * act_bytes), cols);
    else
      k.quantize_act256(x + r * cols, reinterpret_cast<ActBlock256*>(acts.data() + size_t(r) * act_bytes), cols);
  }
  GemmFn gemm = nullptr;
  switch (t) {
    case GgmlType::Q4_0: gemm = k.gemm_q4_0; break;
    case GgmlType::Q4_1: gemm = k.gemm_q4_1; break;
    case GgmlType::Q5_0: gemm = k.gemm_q5_0; break;
    case GgmlType::Q5_1: gemm = k.gemm_q5_1; break;
    case GgmlType::Q8_0: gemm = k.gemm_q8_0; break;
    case GgmlType::Q4_K: gemm = k.gemm_q4_k; break;
    case GgmlType::Q5_K: gemm = k.gemm_q5_k; break;
    default: gemm = k.gemm_q6_k; break;
  }
  std::vector<float> y(size_t(n * rows));
  gemm(n, rows, cols, acts.data(), act_bytes, w, ggml_row_bytes(t, cols), y.data(), rows);
  return y;
}

// Σ_k |w_k · x_k| per output (the dequantised weights): the scale of an output's rounding errors.
inline std::vector<float> abs_products(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x,
                                       int64_t n) {
  std::vector<float> wr(static_cast<size_t>(cols)), s(static_cast<size_t>(n * rows));
  const size_t row_bytes = ggml_row_bytes(t, cols);
  for (int64_t o = 0; o < rows; ++o) {
    dequantize_row(t, w + size_t(o) * row_bytes, wr.data(), cols);
    for (int64_t r = 0; r < n; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += std::fabs(double(wr[size_t(c)]) * x[r * cols + c]);
      s[size_t(r * rows + o)] = float(acc);
    }
  }
  return s;
}

}  // namespace ragkv::test
