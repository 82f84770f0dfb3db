// Which rows of a head the QKV GEMV's rotating store (gemv-rope-store.cuh) gives its warp slots,
// and which rotated pair a row belongs to. Plain C++ as well: tests/test-gemv-rope-rows.cpp checks
// on the host that the slots cover every row once and that a pair's two rows fall to slots 2i and
// 2i + 1 — the adjacent warps that exchange their sums.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define RAGKV_ROPE_ROWS_HD __host__ __device__ __forceinline__
#else
#define RAGKV_ROPE_ROWS_HD inline
#endif

namespace ragkv {

// Row t of a head (t < head_dim) is in rotated pair i when t < 2 · half: pairs (2i, 2i + 1), or
// (i, i + half) under NeoX.
RAGKV_ROPE_ROWS_HD int rope_pair_of_row(int t, int half, bool neox) {
  return neox ? (t < half ? t : t - half) : t / 2;
}

// The row of its head that slot t computes (t < head_dim): in a rotated part (Q, K), slots 2i and
// 2i + 1 of the first 2 · half take pair i's first and second rows; every other slot its own row.
RAGKV_ROPE_ROWS_HD int rope_row_of_slot(int t, int half, bool neox, bool rotated_part) {
  if (!rotated_part || !neox || t >= 2 * half) return t;
  return t / 2 + (t % 2) * half;
}

}  // namespace ragkv
