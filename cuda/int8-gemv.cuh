// Launchers of the decode GEMV on 8-bit activation blocks (int8-gemv.cu): a decode step's x
// quantised per block on the device as the CPU backend's block8 products quantise it, then each
// quantised weight row against it in integer dot products (quant-dot.cuh). All pointers are
// device memory; a weight is `rows` rows of `cols` values of type t, as quant-matmul.cuh says.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/format/quant.h"
#include "cuda/quant-dot.cuh"
#include "cuda/quant-matmul.cuh"

namespace ragkv {

// Work memory for the activation blocks of n rows of cols values in blocks of `block` values
// (quant_dot::act_block of the weight's type; cols a multiple of it).
size_t act_q8_bytes(int block, int64_t n, int64_t cols);

// The arrays of those blocks in `work` (256-byte aligned), and the same read-only: for kernels that
// write the blocks themselves (rms-norm.cu's fused norm).
quant_dot::ActQ8Out act_q8_outputs(int block, int64_t n, int64_t cols, void* work);
quant_dot::ActQ8 act_q8_view(const quant_dot::ActQ8Out& blocks, int64_t cols);

// x [n][cols] f32 → activation blocks in `work` (act_q8_bytes of it, 256-byte aligned): q, d and
// dsum (block 32) or bsum (block 256), exactly the CPU's quantize_act32 / quantize_act256 values.
quant_dot::ActQ8 quantize_act_q8_cuda(const float* x, int64_t n, int64_t cols, int block, void* work,
                                      cudaStream_t stream);

// The same blocks of act(gate) ⊙ up (silu, or gelu_tanh when gelu) for gate, up [n][cols]: what
// swiglu / geglu then quantize_act_q8_cuda give, bit for bit, in one pass.
quant_dot::ActQ8 quantize_glu_act_q8_cuda(const float* gate, const float* up, int64_t n, int64_t cols, bool gelu,
                                          int block, void* work, cudaStream_t stream);

// Where a GEMV launch's weight rows lie: the rows of part p (out.first[p] .. out.first[p + 1]) at
// part[p], row r of the part at part[p] + r · row bytes (the parts of a stack, one buffer each).
struct GemvWeights {
  const uint8_t* part[GemvOutputs::kMaxParts] = {};
};

// out rows (GemvOutputs, rows out.first[out.parts]) = a [n][cols] · Wᵀ for weights of type t
// (quant_dot::with_lane) in the parts w, n ≤ kQuantGemvMaxRows, a quantised in
// quant_dot::act_block(t) blocks: each output the CPU's block8 product up to the order its f32
// block terms are added, whichever launch (and part) its row is in.
void int8_gemv_cuda(GgmlType t, const GemvWeights& w, int64_t cols, const quant_dot::ActQ8& a, int64_t n,
                    const GemvOutputs& out, cudaStream_t stream);

// Whether parts of type t0 followed by parts of type t1 have a launch of their own (the K-quant
// mixes' Q and K, then a Q6_K V: Q4_K or Q5_K, then Q6_K; both on 256-value activation blocks).
bool int8_gemv_pairs(GgmlType t0, GgmlType t1);
// int8_gemv_cuda over parts of type t0 (rows before first1) and of type t1 (from first1), in one
// launch: each row what int8_gemv_cuda of its type gives, bit for bit.
void int8_gemv_pair_cuda(GgmlType t0, GgmlType t1, int64_t first1, const GemvWeights& w, int64_t cols,
                         const quant_dot::ActQ8& a, int64_t n, const GemvOutputs& out, cudaStream_t stream);

// Whether int8_gemv_glu_q8_cuda has a launch for gate/up weights of type t and the down
// product's activation blocks of `block` values: Q4_K, Q5_K, Q6_K and Q8_0, their own block size.
bool int8_gemv_glu_q8_types(GgmlType t, int block);
// A decode step's gate/up products (gate_w, up_w: ff rows each of type t, a their input's blocks),
// GLU (silu, or gelu_tanh when gelu) stored in glu [n][ff], and its activation blocks of `block`
// values in q8 (act_q8_outputs(block, n, ff, …)): what int8_gemv_cuda into gate and up, then
// quantize_glu_act_q8_cuda give (the blocks bit for bit), in one launch. chunk_done: ff / block
// device counters, zero, left zero.
void int8_gemv_glu_q8_cuda(GgmlType t, const uint8_t* gate_w, const uint8_t* up_w, int64_t ff, int64_t cols,
                           const quant_dot::ActQ8& a, int64_t n, bool gelu, float* glu, int block,
                           const quant_dot::ActQ8Out& q8, unsigned* chunk_done, cudaStream_t stream);

// Whether int8_gemv_rope_cuda has a launch for parts of type t0, then t1 (t1 == t0: one type):
// Q4_K, Q5_K, Q6_K and Q8_0 alone, the int8_gemv_pairs pairs.
bool int8_gemv_rope_types(GgmlType t0, GgmlType t1);
// A layer's Q, K and V (out.parts = 3, rows of whole heads) of types t0, then t1 from row first1
// (first1 = all rows where t1 == t0), stored as `rope` says (GemvRope, quant-matmul.cuh): what
// int8_gemv_cuda (or int8_gemv_pair_cuda), then rope_qk_scatter_kv_cuda give, in one launch.
void int8_gemv_rope_cuda(GgmlType t0, GgmlType t1, int64_t first1, const GemvWeights& w, int64_t cols,
                         const quant_dot::ActQ8& a, int64_t n, const GemvOutputs& out, const GemvRope& rope,
                         cudaStream_t stream);

}  // namespace ragkv
