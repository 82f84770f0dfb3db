// Launchers of the kernels over weights that stay in their GGUF quantised blocks on the device
// (quant-matmul.cu; the blocks are decoded by quant-decode.cuh, the CPU backend's values exactly).
// A weight here is `rows` rows of `cols` values of type t (quant_decode::device_decodable(t)), row r
// at w + r · row_bytes with row_bytes = cols / block elements · block bytes: the GGUF tensor's
// bytes as they are. cols is a multiple of the type's block. All pointers are device memory.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/format/quant.h"

namespace ragkv {

// The most rows of activations quant_gemv_cuda takes (decode steps; more rows go through a
// dequantised tile and the f16 GEMM).
constexpr int64_t kQuantGemvMaxRows = 8;

// dst [rows][cols] = the weight's values rounded to the nearest f16 (__float2half_rn, as the
// host's fp32_to_fp16): what load_weight stores when it converts a matrix to f16.
void dequantize_to_f16_cuda(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, __half* dst,
                            cudaStream_t stream);

// y[r · y_ld + o] = Σ_k x[r · cols + k] · W[o][k] (+ bias[o] when bias is not null), for r < n
// (1 ≤ n ≤ kQuantGemvMaxRows) and o < rows: f32 activations times the decoded f32 weights, f32
// accumulation. rows ≤ 2^31 − 1 warps' worth of blocks (4 outputs per block).
void quant_gemv_cuda(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                     float* y, int64_t y_ld, const float* bias, cudaStream_t stream);

// Where a GEMV's output rows go: rows [first[p], first[p + 1]) of the matrix to y[p] (row stride
// ld[p], column o − first[p]), plus bias[p] when not null; first[0] = 0, first[parts] = rows.
struct GemvOutputs {
  static constexpr int kMaxParts = 3;
  int parts = 1;
  int64_t first[kMaxParts + 1] = {};
  float* y[kMaxParts] = {};
  int64_t ld[kMaxParts] = {};
  const float* bias[kMaxParts] = {};
};

// What a decode step's QKV GEMV stores in place of its plain rows (gemv-rope-store.cuh): the
// launch's three parts are a layer's Q, K and V, in that order, each of whole heads of head_dim
// rows; activation row r is at positions[r] and its K and V rows go to cache row dst_rows[r]
// (distinct rows) of k_dst and v_dst (kv_cols values a row; f16 when dst_f16, else f32). Q's and
// K's outputs are stored rotated (their first 2 · half dimensions of each head, pairs (2i, 2i + 1),
// or (i, i + half) when neox), K's and V's rows also to the cache: the values the plain store, then
// rope_qk_scatter_kv_cuda (rope.cuh) leave, bit for bit.
struct GemvRope {
  const int32_t* positions = nullptr;  // [n]
  const float* inv_freq = nullptr;     // [half], as rope.cuh's
  const int32_t* dst_rows = nullptr;   // [n]
  void* k_dst = nullptr;
  void* v_dst = nullptr;
  bool dst_f16 = true;
  bool neox = false;
  int head_dim = 0;
  int half = 0;  // n_rot / 2 ≥ 1
  float freq_scale = 1.f;
  int64_t kv_cols = 0;
};

// The same product over an f16 matrix w [rows][cols] (cols a multiple of 8, rows 16-byte aligned):
// f32 activations times the exact f16 weights, f32 accumulation — decode steps on f16 weights.
void f16_gemv_cuda(const __half* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, int64_t y_ld,
                   const float* bias, cudaStream_t stream);
// f16_gemv_cuda into a stack's outputs, one launch (a decode step's QKV and gate/up).
void f16_gemv_parts_cuda(const __half* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                         const GemvOutputs& out, cudaStream_t stream);
// f16_gemv_parts_cuda into a layer's Q, K and V outputs (out.parts = 3, rows of whole heads, at
// most 2^31 − 1 of them), stored as `rope` says: the products, then rope_qk_scatter_kv_cuda, in
// one launch.
void f16_gemv_rope_cuda(const __half* w, int64_t rows, int64_t cols, const float* x, int64_t n, const GemvOutputs& out,
                        const GemvRope& rope, cudaStream_t stream);
// A decode step's gated FFN input on an f16 gate/up stack w_gate_up [2 ff][cols]: out [n][ff] =
// act(x · gateᵀ) ⊙ (x · upᵀ), act silu or (gelu) gelu_tanh — what f16_gemv_parts_cuda into gate and
// up, then swiglu / geglu store, bit for bit, in one launch.
void f16_gemv_glu_cuda(const __half* w_gate_up, int64_t ff, int64_t cols, const float* x, int64_t n, bool gelu,
                       float* out, cudaStream_t stream);

// out[i][j] = W[ids[i]][j] · scale for i < n, j < cols: one f32 multiply of the decoded value, as
// the CPU backend's embed (bit-identical). ids checked on the host (each in [0, rows)).
void embed_quant_cuda(GgmlType t, const uint8_t* w, int64_t cols, const int32_t* ids, int64_t n, float* out,
                      float scale, cudaStream_t stream);

}  // namespace ragkv
