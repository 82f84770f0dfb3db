// Products on GGUF weight blocks as they lie in the file (the CPU backend keeps weights quantised).
// Activations are quantised per block to 8 bits — one f32 scale per 32 values for the legacy
// types (Q4_0 … Q8_0), per 256 for the K-quants, with the block sums the weights' offsets and
// mins need — and each weight block meets its activation block in an integer dot product, scaled
// once per block in f32: the idea of llama.cpp's quantised vec_dot kernels, in our own layout and
// code. F16 and BF16 weights meet f32 activations. Products that keep their activations wide
// (Weight::wide_activations, the output head) meet Q8_0 weights with 16-bit activation blocks:
// rounding 256 times finer than 8 bits, at integer-product speed.
//
// Every kernel computes each output y[i][j] from activation row i and weight row j alone, in an
// order fixed by k: a row's result does not depend on the other rows of the call (how many
// queries are decoded together), so batched decode equals unbatched decode bit for bit. (The CPU
// backend gives calls of 32 rows or more — prompts — to a dequantise-then-SGEMM path instead,
// core/backend/cpu-matmul.cpp, so this holds for batches of up to 31 rows.)
//
// One table per instruction set: the portable scalar table (quant-kernels-scalar.cpp, the
// reference) and AVX2 + FMA + F16C (quant-kernels-avx2.cpp, compiled for that ISA alone and
// chosen at run time when the CPU has it), so one binary runs on CPUs with and without AVX2.
// The tables agree exactly on the quantised activations and on every integer block sum; they
// differ only in the order f32 partial sums are added (tests/test-quant-kernels.cpp bounds it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/format/quant.h"

namespace ragkv {

// 32 activations x ≈ d · q (the legacy types' activation block).
struct ActBlock32 {
  float d;      // max |x| / 127 (0 for an all-zero block)
  float dsum;   // d · Σ q: what a weight offset or min multiplies
  int8_t q[32];
};
static_assert(sizeof(ActBlock32) == 40);

// 32 activations x ≈ d · q at 16 bits (wide activations against Q8_0 weights).
struct ActBlock32W {
  float d;  // max |x| / 32767 (0 for an all-zero block)
  int16_t q[32];
};
static_assert(sizeof(ActBlock32W) == 68);

// 256 activations x ≈ d · q (the K-quants' activation block).
struct ActBlock256 {
  float d;           // max |x| / 127
  int16_t bsum[16];  // Σ q over each 16 values: for the K-quants' mins and Q6_K's offset
  int8_t q[256];
};
static_assert(sizeof(ActBlock256) == 292);

// What a weight type's kernels read as activations.
enum class ActFormat : uint8_t { f32, q8_32, q8_256, q16_32 };
ActFormat act_format(GgmlType t);             // throws for a type without kernels
// What a weight type's kernels read as wide activations: q16_32 for Q8_0, f32 for F16/BF16/F32;
// throws for the other types (their wide products take dequantised tiles, cpu-matmul.cpp).
ActFormat wide_act_format(GgmlType t);
size_t act_row_bytes(ActFormat f, int64_t k);  // one activation row of k values

// y[i · ldy + j] = x_i · w_jᵀ for activation rows i < m (x_stride bytes apart, in the weight
// type's ActFormat) and weight rows j < n (w_stride bytes apart, k values each, k a multiple of
// the block size).
using GemmFn = void (*)(int64_t m, int64_t n, int64_t k, const void* x, size_t x_stride, const uint8_t* w,
                        size_t w_stride, float* y, int64_t ldy);

using DequantFn = void (*)(const uint8_t* w, float* y, int64_t k);

// Keys per tile of the prompt attention kernels (QuantKernels::attn_scores_tile).
inline constexpr int kAttnTile = 64;

struct QuantKernels {
  const char* name;  // "avx2", "scalar"
  // One row of k values (a multiple of 32, resp. 256) into activation blocks.
  void (*quantize_act32)(const float* x, ActBlock32* y, int64_t k);
  void (*quantize_act256)(const float* x, ActBlock256* y, int64_t k);
  void (*quantize_act32_wide)(const float* x, ActBlock32W* y, int64_t k);
  GemmFn gemm_q4_0, gemm_q4_1, gemm_q5_0, gemm_q5_1, gemm_q8_0, gemm_q4_k, gemm_q5_k, gemm_q6_k;
  GemmFn gemm_f16, gemm_bf16;  // f32 activations
  // F32 weights against f32 activations: dequantised rows against a decode step's few wide
  // activation rows (cpu-matmul.cpp), where SGEMM would spend more on packing than on products.
  GemmFn gemm_f32;
  // Q8_0 weights against 16-bit activation blocks (ActBlock32W): the products of weights that
  // keep their activations wide (Weight::wide_activations, the output head).
  GemmFn gemm_q8_0_wide;
  // Attention of nq query rows (heads sharing one KV head, dim values each, q_h at q + h · dim)
  // over f16 rows (decode): out[h · n + j] = scale · q_h · k_j for j < n, k_j at k + j · k_stride
  // (elements); and out_h += Σ_j p[h · n + j] · v_j with out_h at out + h · dim. Each K/V row is
  // converted once for all nq heads; a head's result has the same bits whatever nq is.
  void (*dot_f16_rows)(const float* q, int nq, const uint16_t* k, size_t k_stride, int64_t n, int dim, float scale,
                       float* out);
  void (*axpy_f16_rows)(const float* p, int nq, const uint16_t* v, size_t v_stride, int64_t n, int dim, float* out);
  // Prompt attention on f32 tiles of kAttnTile keys (core/backend/cpu-attention.cpp), for nr ≤ 4
  // query rows (row r at q + r · q_stride, dim values): scores s[r · kAttnTile + j] = scale · q_r ·
  // k_j for the tile's keys stored transposed (k_j[c] at kt[c · kAttnTile + j]), every j of the
  // tile; and o_r += Σ_{j < n} p[r · kAttnTile + j] · v_j, v_j at v + j · dim, o_r at o + r · o_stride.
  // Each row runs the same operations whatever nr is, so its bits never depend on its neighbours.
  void (*attn_scores_tile)(const float* q, size_t q_stride, int nr, const float* kt, int dim, float scale, float* s);
  void (*attn_values_tile)(const float* p, int nr, const float* v, int64_t n, int dim, float* o, size_t o_stride);
  // One row of k values (a multiple of the block size) to f32, the same values as core/format/quant.h's
  // dequantize_row (its products and fused multiply-adds, in the same order): prompts' tiles and
  // the output head dequantise through them (the portable table calls dequantize_row).
  DequantFn dequantize_q4_0, dequantize_q4_1, dequantize_q5_0, dequantize_q5_1, dequantize_q8_0, dequantize_q4_k,
      dequantize_q5_k, dequantize_q6_k;
};

// Prompt products on K-quant weights (Q4_K, Q5_K, Q6_K) for calls of many activation rows: the
// weights are repacked per call, sixteen rows interleaved into the lanes of a vector, and
// multiplied by integer dot products (AVX-512 VNNI, quant-kernels-vnni.cpp); each output still
// depends only on its activation row and its weight row. Two tables: 16-bit activation blocks of
// 32 values (the default: rounding 256 times finer than 8 bits, within the golden tolerances of
// the f32 path) and 8-bit blocks of 256 (ActBlock256, llama.cpp's Q8_K precision: about twice as
// fast, the same integer sums as the K-quant kernels above).
struct PromptKernels {
  const char* name;  // "avx512-vnni-16", "avx512-vnni-8"
  size_t (*act_row_bytes)(int64_t k);                          // one activation row in the kernels' format
  void (*quantize_act)(const float* x, uint8_t* row, int64_t k);  // k a multiple of 256
  GemmFn gemm_q4_k, gemm_q5_k, gemm_q6_k;
  GemmFn gemm_q4_k_rows16;  // on Q4_K weights in the Q4KRows16 layout (w, w_stride as Q4KRows16::gemm)
  // Legacy 32-value blocks, k any multiple of 32 (16-bit table only; null in the 8-bit one, whose
  // activation blocks are 256 values): each block's integer sum scaled in f32 by its own d · a.d,
  // Q4_1/Q5_1's offset adding m · a.d · Σ a.
  GemmFn gemm_q4_0, gemm_q4_1, gemm_q5_0, gemm_q5_1;
};
// The tables when the CPU has AVX-512 F/BW/VL and VNNI, else null.
const PromptKernels* prompt_kernels_vnni16();
// The 16-bit table with the K-quant kernels only (RAGKV_PREFILL_KERNELS=kquants).
const PromptKernels* prompt_kernels_vnni16_kquants();
const PromptKernels* prompt_kernels_vnni8();
// What the CPU backend uses for prompts: prompt_kernels_vnni16(); with RAGKV_PREFILL_KERNELS=int8
// in the environment the 8-bit table, with =kquants the K-quant-only one; null (dequantised
// tiles into SGEMM, cpu-matmul.cpp) without AVX-512 VNNI, with RAGKV_PREFILL_KERNELS=f32, or with
// RAGKV_CPU_KERNELS=scalar.
const PromptKernels* prompt_kernels();
// Q6_K weights against 16-bit activation blocks (ActBlock32W), row by row, as gemm_q8_0_wide: the
// decode steps' products of weights that keep their activations wide (the Q6_K output head of a
// Q4_K_M file) without dequantising the head every step. Null without AVX-512 VNNI.
GemmFn gemm_q6_k_wide_vnni();
// Q4_K weights against 8-bit activation blocks (ActBlock256) in 512-bit vectors, the decode
// steps' kernel where the CPU has AVX-512 VNNI: the same integer sums as the tables' gemm_q4_k
// (an 8B-shaped Q4_K_M decode spent 45 % of its time in the AVX2 one, most of that unpacking
// scales). Null without AVX-512 VNNI.
GemmFn gemm_q4_k_decode_vnni();
// Q4_K weights repacked once at load where the CPU has AVX-512 VNNI (the CPU backend's matmul
// weights, cpu-backend.cpp): sixteen rows per group, each super-block's nibbles interleaved so that
// a 32-bit lane holds four consecutive values of one row, the 6-bit scales and mins unpacked to
// bytes, d and dmin kept as f16 (2368 bytes per group and super-block, 2.8 % more than the file's
// 16 × 144; rows past the weight's end zero). Decode steps then multiply sixteen rows per
// instruction with no per-row unpacking (the interleaving the prompt kernels build per call, here
// kept from load). Products have the integer sums of the portable kernels (gemm) or the same bits
// as the 16-bit prompt table's on the file's rows (PromptKernels::gemm_q4_k_rows16).
struct Q4KRows16 {
  size_t (*bytes)(int64_t rows, int64_t k);  // the whole weight's groups
  size_t (*group_bytes)(int64_t k);          // one group of sixteen rows
  // w: rows of ws bytes in the file's Q4_K layout, k a multiple of 256; out: bytes(rows, k), 64-aligned.
  void (*repack)(const uint8_t* w, size_t ws, int64_t rows, int64_t k, uint8_t* out);
  // 8-bit activation rows (ActBlock256) against the groups: w = the group that holds the call's
  // first weight row (which must be a multiple of 16), w_stride = group_bytes(k).
  GemmFn gemm;
};
const Q4KRows16* q4_k_rows16();  // null without AVX-512 VNNI

// The prompt kernel for weights of type t, null for a type without one.
GemmFn prompt_gemm_for(const PromptKernels& kernels, GgmlType t);

// A row of weights of type t to f32 through the table's dequantiser where it has one, else
// core/format/quant.h's dequantize_row: the same values either way.
void dequantize_row_with(const QuantKernels& kernels, GgmlType t, const uint8_t* src, float* dst, int64_t k);

// The kernel for weights of type t (Q4_0 … Q6_K, F16, BF16); throws for other types.
GemmFn gemm_for(const QuantKernels& kernels, GgmlType t);

// The tables. quant_kernels_avx2() is null when the CPU lacks AVX2, FMA or F16C.
const QuantKernels& quant_kernels_scalar();
const QuantKernels* quant_kernels_avx2();
// The best table for this CPU, chosen once; RAGKV_CPU_KERNELS=scalar in the environment forces
// the portable one (for comparisons).
const QuantKernels& quant_kernels();

}  // namespace ragkv
