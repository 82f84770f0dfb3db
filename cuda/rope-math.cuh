// The arithmetic of one rotary pair (RoFormer, Su et al. 2021, §3.4.2), shared by rope.cu's kernels
// and the QKV GEMV's rotating store (gemv-rope-store.cuh), so that both rotate a pair to the same
// bits: every product and sum rounded on its own (__fmul_rn, __fadd_rn: no contraction into an FMA
// that the compiler might make in one kernel and not in the other).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// cos θ and sign · sin θ for θ = (position · freq_scale) · inv_freq, the two float products the
// CPU backend computes (rope.cu's header says why the accurate sinf/cosf).
__device__ __forceinline__ void rope_cos_sin(int32_t position, float freq_scale, float inv_freq, float sign, float& c,
                                             float& s) {
  const float theta = __fmul_rn(__fmul_rn(static_cast<float>(position), freq_scale), inv_freq);
  c = cosf(theta);
  s = sign * sinf(theta);
}

// (a, b) rotated: r0 = a·c − b·s, r1 = a·s + b·c.
__device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float& r0, float& r1) {
  r0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
  r1 = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

}  // namespace ragkv
