// The last block of a grid (or of a group of its blocks) to finish, found without another launch:
// the CUDA programming guide's threadFenceReduction pattern, shared by split-K's combine in its
// own last blocks (attention-decode.cu) and the decode GLU's quantisation in the gate/up GEMV's
// (int8-gemv.cu).
#pragma once
#include <cuda_runtime.h>

namespace ragkv {

// Counts the calling block on *counter, once its threads' global stores are visible to every
// block, and returns true in the block that brings the count to `blocks` — after a fence, so that
// it reads the others' stores (through L2: __ldcg), and with the counter zeroed again for the next
// launch (a kernel replayed in a CUDA graph finds it zero). Every thread of the block calls it,
// after its stores; the result is the same in all of them.
__device__ __forceinline__ bool last_block_to_finish(unsigned* counter, unsigned blocks) {
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == blocks - 1;
  __syncthreads();
  if (!last) return false;
  __threadfence();
  if (threadIdx.x == 0) *counter = 0;
  return true;
}

}  // namespace ragkv
