// cuda/gemv-rope-rows.h: the warp slots of the QKV GEMV's rotating store (cuda/gemv-rope-store.cuh)
// cover each row of a head once, and the two rows of every rotated pair — (2i, 2i + 1), or NeoX's
// (i, i + half) — go to slots 2i (the pair's first element) and 2i + 1, the adjacent warps that
// meet through shared memory; V's rows and the dimensions past the rotation keep their own slots.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "cuda/gemv-rope-rows.h"

TEST_CASE("gemv rope rows: every row once, each rotated pair on slots 2i and 2i + 1") {
  for (const int head_dim : {2, 32, 64, 80, 128, 256})
    for (const int n_rot : {head_dim, head_dim / 2, 2})
      for (const bool neox : {false, true})
        for (const bool rotated : {false, true}) {
          if (n_rot % 2 != 0 || n_rot == 0) continue;
          CAPTURE(head_dim);
          CAPTURE(n_rot);
          CAPTURE(neox);
          CAPTURE(rotated);
          const int half = n_rot / 2;
          std::vector<int> seen(static_cast<std::size_t>(head_dim), 0);
          for (int t = 0; t < head_dim; ++t) {
            const int row = ragkv::rope_row_of_slot(t, half, neox, rotated);
            REQUIRE(row >= 0);
            REQUIRE(row < head_dim);
            ++seen[static_cast<std::size_t>(row)];
          }
          for (const int s : seen) CHECK(s == 1);
          for (int t = 0; t < 2 * half; t += 2) {
            const int r0 = ragkv::rope_row_of_slot(t, half, neox, rotated);
            const int r1 = ragkv::rope_row_of_slot(t + 1, half, neox, rotated);
            if (!rotated) {
              CHECK(r0 == t);
              CHECK(r1 == t + 1);
              continue;
            }
            // The pair rope.cu's rotate_pair rotates: (i0, i1) with i0 the even slot's row.
            const int i = t / 2;
            CHECK(r0 == (neox ? i : 2 * i));
            CHECK(r1 == (neox ? i + half : 2 * i + 1));
            CHECK(ragkv::rope_pair_of_row(r0, half, neox) == i);
            CHECK(ragkv::rope_pair_of_row(r1, half, neox) == i);
          }
          for (int t = 2 * half; t < head_dim; ++t) CHECK(ragkv::rope_row_of_slot(t, half, neox, rotated) == t);
        }
}
