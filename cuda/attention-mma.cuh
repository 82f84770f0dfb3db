// Tensor-core attention for prefill, recompute rows and questions (attention-mma.cu): the
// FlashAttention-2 loop on mma.sync f16 tiles with f32 accumulation, split over key ranges when
// a call's blocks would not fill the GPU. attention_cuda (attention.cu) routes a call here when
// attention_mma_applies, and the key-total and segment-mass launchers (attention-key-mass.cu,
// attention-segment-mass.cu) call it first; the arguments were checked there.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention.cuh"

namespace ragkv {

// Whether the tensor-core kernel (and split-K) are on: yes unless RAGKV_CUDA_ATTENTION=f32 (the f32
// FMA kernel of attention.cu everywhere, for comparison). Read once per process.
bool attention_mma_enabled();

// True when the tensor-core path takes a checked call: enabled (and a.tensor_cores), K/V f16, no
// segment mass or key totals, at least one key. Any number of query vectors: even a block with few
// of its 64 vectors in use computes a key tile on tensor cores several times faster than the f32
// kernel's FMAs (attention_route sends calls of at most kDecodeMaxVectors vectors per KV head to
// split-K first).
bool attention_mma_applies(const AttentionArgs& a, bool with_mass);

// The most key ranges a call is split into (AttentionArgs::key_splits caps there too).
constexpr int kMaxKeySplits = 16;

// The workspace a call needs for its key ranges' partial sums: 0 when its blocks fill the GPU
// unsplit; a few query vectors per KV head over many keys (short questions, recompute batches of
// a few rows) are split over the keys, flash-decoding's way.
size_t attention_mma_work_bytes(const AttentionArgs& a);

// Queues the kernel on `stream` (head_dim 32, 64, 128 or 256). With row_stats (device,
// [n_kv_head][n_q · n_head / n_kv_head], 8-byte aligned) it also writes each query vector's final
// softmax statistics (m, l) there, for the key-total and segment-mass passes. Throws
// ragkv::Error when the launch fails.
void attention_mma_cuda(const AttentionArgs& a, cudaStream_t stream, float2* row_stats = nullptr);

}  // namespace ragkv
