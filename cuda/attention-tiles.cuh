// Device helpers the tiled attention kernels share (attention.cu, attention-mma.cu and its mass
// passes): the mapping of query vectors to rows and heads, the mask by position, the block's query
// position range that tile skipping compares key tiles against, and the segment of a key row.
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

// A query vector is one (query row, query head) pair; the GQA heads of KV head g are g · group …
// g · group + group − 1, and vector t of KV head g is row t / group, head g · group + t % group.
__device__ __forceinline__ int64_t vector_row(int64_t t, int group) { return t / group; }
__device__ __forceinline__ int vector_head(int64_t t, int group, int g) { return g * group + int(t % group); }
// Where vector t's head_dim values start in a [n_q][q_cols] row-major q or output.
__device__ __forceinline__ int64_t vector_offset(int64_t t, int group, int g, int64_t q_cols, int head_dim) {
  return vector_row(t, group) * q_cols + int64_t(vector_head(t, group, g)) * head_dim;
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

// The segment holding key row j of the boundaries seg_begin [n_seg + 1] (ascending): the last s
// with seg_begin[s] ≤ j, −1 before the first boundary, n_seg at or past the last.
__device__ __forceinline__ int segment_of(const int64_t* __restrict__ seg_begin, int n_seg, int64_t j) {
  int lo = 0, hi = n_seg + 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (__ldg(seg_begin + mid) <= j) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

}  // namespace ragkv::attention_tiles
