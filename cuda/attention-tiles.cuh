// Device helpers the tiled attention kernels share (attention.cu, attention-mma.cu): the mask by
// position and the block's query position range that tile skipping compares key tiles against.
// Device code only: included from .cu files.
#pragma once
#include <climits>
#include <cstdint>

namespace ragkv::attention_tiles {

// Whether a query at qp sees a key at kp: causal by position, and within the sliding window
// (positions in (qp − window, qp]) when window > 0.
__device__ __forceinline__ bool key_visible(int qp, int kp, int window) {
  return kp <= qp && (window <= 0 || int64_t(kp) > int64_t(qp) - window);
}

// [qmin, qmax] of the block's n_valid query positions in shared memory, reduced over the warp so
// that every warp (and lane) holds the same values; INT_MAX / INT_MIN when not causal.
__device__ __forceinline__ void query_position_range(const int* qpos_s, int n_valid, bool causal, int lane, int& qmin,
                                                     int& qmax) {
  qmin = INT_MAX, qmax = INT_MIN;
  if (!causal) return;
  for (int i = lane; i < n_valid; i += 32) qmin = min(qmin, qpos_s[i]), qmax = max(qmax, qpos_s[i]);
  qmin = __reduce_min_sync(0xffffffffu, qmin);
  qmax = __reduce_max_sync(0xffffffffu, qmax);
}

}  // namespace ragkv::attention_tiles
