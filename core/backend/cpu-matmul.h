// The CPU backend's matmul over a CpuWeight's parts (core/backend/cpu-weight.h): F32 parts by SGEMM;
// with Activations::block8 the quantised types by the block kernels of core/backend/quant-kernels.h on
// the weight's own bytes, the activation rows quantised once per call into this object's scratch;
// prompts on K-quant weights, where the CPU has AVX-512 VNNI, by the prompt kernels (16-bit
// activation blocks against weights repacked per call); other wide activations by SGEMM on dequantised tiles (or, in short calls, Q8_0 kernels on 16-bit
// activation blocks, F16/BF16 kernels on f32, and f32 row kernels on a few dequantised rows).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/backend/cpu-weight.h"

namespace ragkv {

struct PromptKernels;

class CpuMatmul {
 public:
  // outs: one output for the whole weight, or one per part; biases one per output (may be null).
  void run(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, std::span<const Weight* const> biases,
           int threads, Activations act);

 private:
  void run_prompt_kernels(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads,
                          const PromptKernels& pk);
  void run_dequant_gemm(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads);
  bool run_q6_k_wide(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads);
  void run_dequant_rows(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads);
  static void add_biases(std::span<const Tensor> outs, std::span<const Weight* const> biases);
  std::vector<uint8_t> act32_;   // ActBlock32 rows of x   [x.rows][x.cols / 32]
  std::vector<uint8_t> act256_;  // ActBlock256 rows of x  [x.rows][x.cols / 256]
  std::vector<uint8_t> act16_;   // ActBlock32W rows of x  [x.rows][x.cols / 32]
  std::vector<uint8_t> act_prompt_;  // x in the prompt kernels' format (PromptKernels::act_row_bytes)
  // Each thread's dequantised f32 tile, kept between calls: a fresh one per call was zero-filled
  // each time (7 % of a 16-token prefill, bench/results/README.md, 2026-11-25).
  std::vector<std::vector<float>> tile_f32_;
};

}  // namespace ragkv
