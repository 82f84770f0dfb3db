// Split-K attention for decode steps and short questions (attention-decode.cu): the keys split
// into ranges, one block per (KV head, range), and the ranges' softmax sums combined. attention_cuda
// (attention.cu) routes a call here when attention_decode_applies; the arguments were checked there.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace ragkv {

// At most this many query vectors (query rows × query heads per KV head) per KV head.
constexpr int kDecodeMaxVectors = 8;

struct DecodeParams {
  const float* q = nullptr;        // f32 [n_q][q_cols]
  const int32_t* q_pos = nullptr;  // [n_q] (causal only)
  const void* k = nullptr;         // f16 or f32 [>= n_kv][kv_cols], 16-byte aligned rows
  const void* v = nullptr;
  const int32_t* k_pos = nullptr;  // [n_kv] (causal only)
  float* out = nullptr;            // f32 [n_q][q_cols]
  int64_t n_q = 0, n_kv = 0, q_cols = 0, kv_cols = 0;
  int n_head = 0, group = 0, n_vec = 0, window = 0;
  float scale = 0.f, softcap = 0.f;
  bool causal = true;
};

// True when the split-K path takes the call: no segment mass or key totals, 1 to
// kDecodeMaxVectors vectors per KV head, and more keys than one range.
bool attention_decode_applies(int64_t n_vec, int64_t n_kv, bool with_mass);

// Queues the two kernels on `stream` (head_dim 32, 64, 128 or 256). Throws ragkv::Error when a
// launch fails.
void attention_decode_cuda(const DecodeParams& p, int n_kv_head, int head_dim, bool kv_f16, cudaStream_t stream);

}  // namespace ragkv
