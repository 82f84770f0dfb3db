// The rotating store of a decode step's QKV GEMV (issue 40 item 1: RoPE and the new K and V rows'
// scatter in a neighbouring kernel, one launch fewer per layer): where the GEMV kernels
// (quant-matmul.cu's f16 GEMV, int8-gemv.cu's integer one) store a row plainly (gemv-store.cuh),
// these store it as GemvRope (quant-matmul.cuh) says — Q and K rotated, K and V also into their
// cache rows — the values of the plain store, then rope.cu's rope_qk_scatter_kv, bit for bit.
//
// A rotated pair's two rows are computed by adjacent warps of one block (gemv_rope_row gives warp
// slot g its row), each warp's sums meet its partner's through shared memory, and both rotate the
// pair with rope.cu's arithmetic (rope-math.cuh), each storing its own element.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/gemv-rope-rows.h"
#include "cuda/quant-matmul.cuh"
#include "cuda/rope-math.cuh"

namespace ragkv {

// Whether a launch's outputs and GemvRope are a layer's Q, K and V as this store takes them: three
// parts of whole heads (head_dim even, 1 ≤ half ≤ head_dim / 2), grids of at most 2^31 − 1 blocks.
inline bool gemv_rope_fits(const GemvOutputs& out, const GemvRope& rope, int64_t rows, int warps_per_block) {
  if (out.parts != 3 || out.first[0] != 0 || out.first[3] != rows || rope.head_dim <= 0 || rope.head_dim % 2 != 0 ||
      rope.half < 1 || 2 * rope.half > rope.head_dim || (rows + warps_per_block - 1) / warps_per_block > INT32_MAX)
    return false;
  for (int p = 1; p <= 3; ++p)
    if (out.first[p] % rope.head_dim != 0) return false;
  return true;
}

// The part of `out` holding row o: its output, bias, row stride and index (0 Q, 1 K, 2 V), and o's
// column in it (picked with constant indices, as store_gemv_row does).
struct GemvRopePart {
  float* y;
  const float* bias;
  int64_t ld;
  int64_t c;
  int kind;  // the part: 0 Q, 1 K, 2 V
};

__device__ __forceinline__ GemvRopePart gemv_rope_part(const GemvOutputs& out, int64_t o) {
  GemvRopePart p{out.y[0], out.bias[0], out.ld[0], o, 0};
#pragma unroll
  for (int i = 1; i < GemvOutputs::kMaxParts; ++i)
    if (i < out.parts && o >= out.first[i]) p = {out.y[i], out.bias[i], out.ld[i], o - out.first[i], i};
  return p;
}

// The row warp slot g computes (gemv-rope-rows.h: a Q or K head's rotated pairs to slots 2i and
// 2i + 1, every other slot its own row). A pair's slots are then one block's warps: blocks of an
// even count of warps, parts and heads starting at even rows.
__device__ __forceinline__ int64_t gemv_rope_row(const GemvOutputs& out, const GemvRope& rope, int64_t g) {
  const GemvRopePart p = gemv_rope_part(out, g);
  const int t = static_cast<int>(p.c % rope.head_dim);
  return g - t + rope_row_of_slot(t, rope.half, rope.neox, p.kind != 2);
}

// Row o's sums acc (every lane holding them; active: the warp's slot is a row) stored as GemvRope
// says: lane r < N stores activation row r's value. Every warp of the block must call it (a
// barrier inside), after its row, if any, is computed.
template <int N, int kWarps>
__device__ __forceinline__ void store_gemv_rope(const GemvOutputs& out, const GemvRope& rope, bool active, int64_t o,
                                                const float (&acc)[N]) {
  static_assert(kWarps % 2 == 0, "a pair's two warps in one block");
  __shared__ float sums[kWarps][N];  // each warp's row, bias added: what the plain store writes
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const GemvRopePart p = gemv_rope_part(out, o);
  if (active && lane == 0) {
    const float b = p.bias ? p.bias[p.c] : 0.f;
#pragma unroll
    for (int r = 0; r < N; ++r) sums[warp][r] = p.bias ? acc[r] + b : acc[r];
  }
  __syncthreads();
  if (!active || lane >= N) return;
  const int r = lane;
  float v = sums[warp][r];
  const int t = static_cast<int>(p.c % rope.head_dim);
  if (p.kind != 2 && t < 2 * rope.half) {  // the pair's first element in the even warp, its second in the odd
    const int i = rope_pair_of_row(t, rope.half, rope.neox);
    float c, s, r0, r1;
    rope_cos_sin(rope.positions[r], rope.freq_scale, rope.inv_freq[i], 1.f, c, s);
    rope_rotate(sums[warp & ~1][r], sums[warp | 1][r], c, s, r0, r1);
    v = (warp & 1) ? r1 : r0;
  }
  p.y[r * p.ld + p.c] = v;
  if (p.kind == 0) return;
  const int64_t at = static_cast<int64_t>(rope.dst_rows[r]) * rope.kv_cols + p.c;
  void* dst = p.kind == 1 ? rope.k_dst : rope.v_dst;
  if (rope.dst_f16) static_cast<__half*>(dst)[at] = __float2half_rn(v);
  else static_cast<float*>(dst)[at] = v;
}

// A rotating GEMV block: warp slot g of `rows` (kWarps a block) computes its row
// (gemv_rope_row) with row(o, lane, acc) — the whole warp, acc [N] summed in every lane — and the
// block stores the rows (store_gemv_rope). Warps past the last row take part in the barrier only.
template <int N, int kWarps, typename Row>
__device__ __forceinline__ void gemv_rope_block(const GemvOutputs& out, const GemvRope& rope, int64_t rows,
                                                const Row& row) {
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const bool active = g < rows;  // whole warps: the row's shuffles see all 32 lanes
  const int64_t o = active ? gemv_rope_row(out, rope, g) : 0;
  float acc[N] = {};
  if (active) row(o, static_cast<int>(threadIdx.x % 32), acc);
  store_gemv_rope<N, kWarps>(out, rope, active, o, acc);
}

}  // namespace ragkv
