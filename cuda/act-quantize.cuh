// One 8-bit activation block quantised by one warp (the CPU backend's quantize_act32 /
// quantize_act256, core/backend): the quantisation shared by int8-gemv.cu's kernels (x, or a
// decode step's GLU) and rms-norm.cu's fused norm (the next product's operand written with xn), so
// that every path gives the same blocks bit for bit.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/block-reduce.cuh"
#include "cuda/quant-dot.cuh"

namespace ragkv {

using quant_dot::ActQ8Out;

// Block blk of B values (32 or 256), lane l holding v[0..B/32) = values l·B/32 .. of the block.
// The block's largest |v| from a shuffle reduction (max is exact in any order), each value rounded
// with quant-dot.cuh's act_scale / act_round (the CPU's operations), the integer sums from
// shuffles (per 32 for dsum = d · Σq, per 16 for bsum), exact. All 32 lanes must take part.
template <int B>
__device__ __forceinline__ void quantize_act_block(const float (&v)[B / 32], int lane, int64_t blk,
                                                   const ActQ8Out& out) {
  constexpr int V = B / 32;
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < V; ++i) amax = fmaxf(amax, fabsf(v[i]));
  amax = warp_reduce(amax, MaxOp{});
  float dd, id;
  quant_dot::act_scale(amax, &dd, &id);
  int sum = 0;
  int8_t* qb = out.q + blk * B + lane * V;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int8_t q = quant_dot::act_round(v[i] * id);
    qb[i] = q;
    sum += q;
  }
  if constexpr (B == 32) {
    sum = warp_reduce(sum);
    if (lane == 0) {
      out.d[blk] = dd;
      out.dsum[blk] = dd * float(sum);
    }
  } else {
    static_assert(B == 256, "activation blocks are 32 or 256 values");
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // lanes 2g, 2g + 1: values 16g..16g+15
    if (lane % 2 == 0) out.bsum[blk * 16 + lane / 2] = static_cast<int16_t>(sum);
    if (lane == 0) out.d[blk] = dd;
  }
}

}  // namespace ragkv
