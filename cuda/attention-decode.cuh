// Split-K attention for decode steps and short questions (attention-decode.cu): the keys split
// into ranges, one block per (KV head, range), and the ranges' softmax sums combined. attention_cuda
// (attention.cu) routes a call here when attention_decode_applies; the arguments were checked there.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention.cuh"

namespace ragkv {

// At most this many query vectors (query rows × query heads per KV head) per KV head.
constexpr int kDecodeMaxVectors = 8;

// True when the split-K path takes the call: no segment mass or key totals, 1 to
// kDecodeMaxVectors vectors per KV head, and at least one key.
bool attention_decode_applies(int64_t n_vec, int64_t n_kv, bool with_mass);

// The workspace the split-K path needs for a call: the ranges' partial outputs and (m, l) pairs.
size_t attention_decode_work_bytes(const AttentionArgs& a);

// Queues the two kernels on `stream` for a call attention_cuda has checked (head_dim 32, 64, 128
// or 256; segment mass and key totals ignored). Throws ragkv::Error when a launch fails.
void attention_decode_cuda(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ragkv
