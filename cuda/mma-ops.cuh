// Warp-level tensor-core and copy primitives the tensor-core attention kernels share
// (attention-mma.cu, attention-key-mass.cu, attention-segment-mass.cu, through
// attention-mma-common.cuh): mma.sync.m16n8k16 on f16 with f32 accumulators,
// ldmatrix, f16 packing, reductions over a lane quad (the four lanes that hold one row of an
// accumulator), cp.async. PTX ISA: "Warp-level matrix instructions: mma", "ldmatrix", "cp.async".
// Device code only: included from .cu files.
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

namespace ragkv::mma_ops {

// D = C + A·B on one m16n8k16 tile: f16 A (4 registers of two halves), B (2), f32 C/D (4).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8×8 b16 matrices from shared memory, lane L giving the address of row L % 8 of matrix L / 8
// (16-byte aligned); .trans delivers each matrix transposed (mma-fragments.h).
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __half* row) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const __half* row) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// Two halves from separate addresses (lo in the low half).
__device__ __forceinline__ uint32_t pack_halves(__half lo, __half hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}

__device__ __forceinline__ uint32_t pack_floats(float lo, float hi) {
  return pack_halves(__float2half_rn(lo), __float2half_rn(hi));
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// cp.async (sm_80+): 16 bytes global → shared without passing through registers, or 16 zero
// bytes when !valid (src-size 0: nothing is read). Groups of copies are committed and waited for
// in order: wait_group N returns once at most the N most recent groups are still in flight.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool valid) {
  const auto d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all_but_newest() { asm volatile("cp.async.wait_group 1;\n" ::); }

}  // namespace ragkv::mma_ops
