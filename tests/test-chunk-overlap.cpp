// CRAFT §3's Prefix and Total overlap (core/rag/chunk-overlap.h): the paper's worked example, a third
// request that shares chunks only out of position, repeats and empty requests.
#include <doctest/doctest.h>

#include "core/rag/chunk-overlap.h"

using namespace ragkv;

TEST_CASE("chunk overlap: CRAFT's example, R1 = [C1 C4 C5 C6 C7], R2 = [C1 C2 C3 C4 C5]: prefix 1/5, total 3/5") {
  const ChunkOverlap two = chunk_overlap({{"C1", "C4", "C5", "C6", "C7"}, {"C1", "C2", "C3", "C4", "C5"}});
  CHECK(two.requests == 2);
  CHECK(two.prefix == doctest::Approx(0.2));
  CHECK(two.total == doctest::Approx(0.6));
  // R3 shares three chunks with each earlier request but starts with none of their first chunks.
  const ChunkOverlap three = chunk_overlap(
      {{"C1", "C4", "C5", "C6", "C7"}, {"C1", "C2", "C3", "C4", "C5"}, {"C4", "C5", "C1", "C9", "C8"}});
  CHECK(three.prefix == doctest::Approx((0.2 + 0.0) / 2));
  CHECK(three.total == doctest::Approx((0.6 + 0.6) / 2));
}

TEST_CASE("chunk overlap: the best earlier request per measure, a repeated chunk counted once, empty requests skipped") {
  // R3's longest common prefix is with R1 (2 of 4), its largest intersection with R2 (3 of 4).
  const ChunkOverlap o = chunk_overlap({{"a", "b", "x", "y"}, {}, {"c", "d", "e", "b"}, {"a", "b", "d", "e"}});
  CHECK(o.requests == 3);
  // R2 (c d e b) vs R1: LCP 0, shared {b} = 1; R3 (a b d e): LCP 2 with R1, shared 3 with R2.
  CHECK(o.prefix == doctest::Approx((0.0 + 2.0 / 4) / 2));
  CHECK(o.total == doctest::Approx((1.0 / 4 + 3.0 / 4) / 2));
  CHECK(chunk_overlap({{"a", "a"}, {"a", "b"}}).total == doctest::Approx(0.5));
  CHECK(chunk_overlap({}).requests == 0);
  CHECK(chunk_overlap({{"a"}}).prefix == 0.0);
}
