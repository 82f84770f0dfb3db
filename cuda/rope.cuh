// Rotary position embedding launchers (rope.cu).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// Geometry of one RoPE launch over x [rows][n_heads · head_dim], in place.
struct RopeShape {
  int64_t rows = 0;
  int n_heads = 0, head_dim = 0;
  int n_rot = 0;           // rotated dimensions per head (even, ≤ head_dim); the rest untouched
  float freq_scale = 1.f;  // positions are multiplied by this
  bool neox = false;       // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
  bool inverse = false;    // rotate by −θ
};

// positions: device int32 [rows]; inv_freq: device f32 [n_rot / 2], the per-pair
// base^(−2i/n_rot) / freq_factor_i as the CPU backend computes it (in double, rounded to f32).
// Throws ragkv::Error when the launch fails.
void rope_f32_cuda(float* x, const int32_t* positions, const float* inv_freq, const RopeShape& s,
                   cudaStream_t stream);
void rope_f16_cuda(__half* x, const int32_t* positions, const float* inv_freq, const RopeShape& s,
                   cudaStream_t stream);
// Q [rows][s.n_heads · head_dim] and K [rows][k_heads · head_dim], forward (s.inverse ignored), in
// one launch: each element as rope_f32_cuda / rope_f16_cuda rotates it.
void rope_qk_f32_cuda(float* q, float* k, int k_heads, const int32_t* positions, const float* inv_freq,
                      const RopeShape& s, cudaStream_t stream);
void rope_qk_f16_cuda(__half* q, __half* k, int k_heads, const int32_t* positions, const float* inv_freq,
                      const RopeShape& s, cudaStream_t stream);
// rope_qk_f32_cuda, then K's and V's rows r (k and v: [s.rows][k_heads · head_dim], f32) written
// to rows dst_rows[r] (distinct) of k_dst and v_dst (f16 when dst_f16, else f32), as
// copy_rows_pair_f32_to_f16_cuda / copy_rows_pair_f32_cuda write them: one launch, the same values.
void rope_qk_scatter_kv_cuda(float* q, float* k, const float* v, int k_heads, const int32_t* positions,
                             const float* inv_freq, const RopeShape& s, const int32_t* dst_rows, void* k_dst,
                             void* v_dst, bool dst_f16, cudaStream_t stream);

}  // namespace ragkv
