// Which shared-memory row each lane hands to ldmatrix so that the four 8×8 matrices it loads are
// the mma.m16n8k16 fragments attention-mma.cu needs (PTX ISA: "Warp-level matrix load instruction:
// ldmatrix" and "Matrix Fragments for mma.m16n8k16 with floating point type"). Lane L gives the
// address of row L % 8 of matrix L / 8; a lane T then holds, of matrix i, the two b16 elements
// (T / 4, 2·(T % 4)) and (T / 4, 2·(T % 4) + 1) in register i — with .trans, of the transposed
// matrix: (2·(T % 4), T / 4) and (2·(T % 4) + 1, T / 4).
//
// Plain C++ (constexpr, no CUDA types) so that tests/test-mma-fragments.cpp can emulate ldmatrix
// on the host and check each register against the fragment layout the PTX ISA defines.
#pragma once

namespace ragkv::mma_fragments {

// A row and the first of its 8 columns, relative to a 16×16 tile's corner.
struct TileRow {
  int row = 0, col = 0;
};

// The A operand (16×16, row-major: Q rows × head dims): matrices rows 0–7 / 8–15 × columns 0–7,
// then rows 0–7 / 8–15 × columns 8–15, which are a0, a1, a2, a3.
constexpr TileRow a_row(int lane) {
  const int m = lane / 8;
  return {(m & 1) * 8 + lane % 8, (m >> 1) * 8};
}

// The B operand of S = Q·Kᵀ for two n-tiles (keys j, j + 8 of a 16-key slice) and one k-step (16
// head dims): B[k][n] = K[n][k], so a B fragment pair is K's rows as stored (no transpose).
// Matrices: keys 0–7 × dims 0–7, keys 0–7 × dims 8–15, keys 8–15 × dims 0–7, keys 8–15 × dims
// 8–15, which are b0, b1 of the first n-tile, then b0, b1 of the second. row = key, col = dim.
constexpr TileRow k_row(int lane) {
  const int m = lane / 8;
  return {(m >> 1) * 8 + lane % 8, (m & 1) * 8};
}

// The B operand of O = P·V for one k-step (16 keys) and two n-tiles (head dims d, d + 8):
// B[k][n] = V[k][n], a pair of keys per register, hence ldmatrix .trans on V's rows. Matrices:
// keys 0–7 × dims 0–7, keys 8–15 × dims 0–7, keys 0–7 × dims 8–15, keys 8–15 × dims 8–15, which
// are b0, b1 of the first n-tile, then b0, b1 of the second. row = key, col = dim.
constexpr TileRow v_row(int lane) {
  const int m = lane / 8;
  return {(m & 1) * 8 + lane % 8, (m >> 1) * 8};
}

}  // namespace ragkv::mma_fragments
