// cuda/mma-fragments.h: the rows each lane hands to ldmatrix in the tensor-core attention give,
// register for register, the mma.m16n8k16 fragments the PTX ISA defines. ldmatrix is emulated
// here from the ISA's description, so the check needs no GPU: lane L gives the address of row
// L % 8 of matrix L / 8, and lane T receives of matrix i the elements (T / 4, 2·(T % 4)) and
// (T / 4, 2·(T % 4) + 1) — of the transposed matrix with .trans.
#include <doctest/doctest.h>

#include <array>
#include <cstdint>

#include "cuda/mma-fragments.h"

namespace {

using ragkv::mma_fragments::TileRow;
using Registers = std::array<std::array<uint32_t, 4>, 32>;  // [lane][register]

// A 16×16 tile of distinct b16 values.
uint16_t value(int row, int col) { return uint16_t(row * 16 + col + 1); }

uint32_t pack(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

Registers ldmatrix_x4(TileRow (*row_of)(int), bool trans) {
  Registers r{};
  for (int t = 0; t < 32; ++t)
    for (int i = 0; i < 4; ++i) {
      // Matrix i's element (row, col): row `row` comes from lane 8·i + row's address.
      auto m = [&](int row, int col) {
        const TileRow a = row_of(8 * i + row);
        return value(a.row, a.col + col);
      };
      const int g = t / 4, c = 2 * (t % 4);
      r[size_t(t)][size_t(i)] = trans ? pack(m(c, g), m(c + 1, g)) : pack(m(g, c), m(g, c + 1));
    }
  return r;
}

}  // namespace

TEST_CASE("mma fragments: ldmatrix on the rows a_row, k_row and v_row name yields the m16n8k16 A and B fragments") {
  const Registers a = ldmatrix_x4(ragkv::mma_fragments::a_row, false);
  const Registers k = ldmatrix_x4(ragkv::mma_fragments::k_row, false);
  const Registers v = ldmatrix_x4(ragkv::mma_fragments::v_row, true);
  for (int t = 0; t < 32; ++t) {
    CAPTURE(t);
    const int gid = t / 4, tig = t % 4, c = 2 * tig;
    const auto& at = a[size_t(t)];
    // A (rows × k, row-major): a0 (gid, 2tig..), a1 (gid + 8, 2tig..), a2 (gid, 2tig + 8..), a3 (gid + 8, 2tig + 8..).
    CHECK(at[0] == pack(value(gid, c), value(gid, c + 1)));
    CHECK(at[1] == pack(value(gid + 8, c), value(gid + 8, c + 1)));
    CHECK(at[2] == pack(value(gid, c + 8), value(gid, c + 9)));
    CHECK(at[3] == pack(value(gid + 8, c + 8), value(gid + 8, c + 9)));
    // B of S = Q·Kᵀ, B[k][n] = K[n][k] (the tile: key rows × dim columns): b0 = (k = 2tig, 2tig + 1;
    // n = gid), b1 = k + 8; registers 0–1 for keys 0–7, 2–3 for keys 8–15.
    const auto& kt = k[size_t(t)];
    CHECK(kt[0] == pack(value(gid, c), value(gid, c + 1)));
    CHECK(kt[1] == pack(value(gid, c + 8), value(gid, c + 9)));
    CHECK(kt[2] == pack(value(gid + 8, c), value(gid + 8, c + 1)));
    CHECK(kt[3] == pack(value(gid + 8, c + 8), value(gid + 8, c + 9)));
    // B of O = P·V, B[k][n] = V[k][n] (key rows × dim columns): b0 = (V[2tig][gid], V[2tig + 1][gid]),
    // b1 = keys + 8; registers 0–1 for dims 0–7, 2–3 for dims 8–15.
    const auto& vt = v[size_t(t)];
    CHECK(vt[0] == pack(value(c, gid), value(c + 1, gid)));
    CHECK(vt[1] == pack(value(c + 8, gid), value(c + 9, gid)));
    CHECK(vt[2] == pack(value(c, gid + 8), value(c + 1, gid + 8)));
    CHECK(vt[3] == pack(value(c + 8, gid + 8), value(c + 9, gid + 8)));
  }
}
