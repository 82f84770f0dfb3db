// The gating activations of SwiGLU and GeGLU as device functors, written as the CPU backend
// writes them (same operation order, accurate expf, no fast-math): elementwise.cu's glu kernels
// and glu-f16.cu's fused FFN kernel share them, so both compute each element alike, bit for bit.
#pragma once
#include <cuda_runtime.h>

namespace ragkv {

struct Silu {
  __device__ __forceinline__ float operator()(float g) const { return g / (1.f + expf(-g)); }
};

// GELU's tanh form as the CPU backend writes it: x/2 · (1 + tanh(u)) = x / (1 + e^(−2u)), with
// −2u clamped to [−87, 87], so the special values agree: gelu(−inf) = −inf / e^87 = −inf (the
// CPU's value; 0.5·x·(1 + tanh(u)) would give −inf · 0 = NaN), gelu(+inf) = +inf, NaN stays NaN.
struct GeluTanh {
  __device__ __forceinline__ float operator()(float g) const {
    constexpr float kMinus2Sqrt2OverPi = -1.5957691216057308f;
    const float t = kMinus2Sqrt2OverPi * (g + 0.044715f * g * g * g);
    return g / (1.f + expf(fminf(fmaxf(t, -87.f), 87.f)));
  }
};

}  // namespace ragkv
