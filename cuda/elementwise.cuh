// Element-wise f32 launchers (elementwise.cu): activations, gated activations and the residual add.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// out[i] = silu(gate[i]) · up[i], silu(g) = g / (1 + e^−g). n elements.
void swiglu_f32_cuda(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// out[i] = gelu_tanh(gate[i]) · up[i], gelu_tanh(g) = ½·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))).
void geglu_f32_cuda(const float* gate, const float* up, float* out, int64_t n, cudaStream_t stream);
// y[i] = gelu(x[i]) in the exact erf form x · Φ(x) = x/2 · (1 + erf(x/√2)). x and y may alias.
void gelu_erf_f32_cuda(const float* x, float* y, int64_t n, cudaStream_t stream);
// a[i] += b[i].
void add_f32_cuda(float* a, const float* b, int64_t n, cudaStream_t stream);

}  // namespace ragkv
