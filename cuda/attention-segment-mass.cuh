// Segment mass on tensor cores (attention-segment-mass.cu): Cache-Craft's attention of each query
// row and head per key segment (SegmentMass with boundaries) for calls the tensor-core attention
// takes. attention_cuda (attention.cu) routes a call here (AttentionRoute::mma_segment_mass); the
// arguments were checked there and seg_mass zeroed.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/attention.cuh"

namespace ragkv {

// The workspace a call needs: each query vector's softmax statistics.
size_t attention_segment_mass_work_bytes(const AttentionArgs& a);

// Queues the tensor-core attention of every query row (writing a.out and each vector's final
// softmax statistics) and the segment-mass pass into a.seg_mass (zeroed by the caller) on
// `stream`. Throws ragkv::Error when a launch fails.
void attention_mma_segment_mass_cuda(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ragkv
