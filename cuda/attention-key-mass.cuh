// Key totals on tensor cores (attention-key-mass.cu): prophet's question attention per key row
// (SegmentMass::key_totals) for calls the tensor-core attention takes. attention_cuda
// (attention.cu) routes a call here (AttentionRoute::mma_key_mass); the arguments were checked there.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/attention.cuh"

namespace ragkv {

// The workspace a call needs: each query vector's softmax statistics and each KV head's totals.
size_t attention_key_mass_work_bytes(const AttentionArgs& a);

// Queues the tensor-core attention of every query row (writing a.out and each vector's final
// softmax statistics), the key-total pass over the rows [a.key_mass_first_row, n_q), and the sum
// over KV heads into a.key_mass, on `stream`. Throws ragkv::Error when a launch fails.
void attention_mma_key_mass_cuda(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ragkv
