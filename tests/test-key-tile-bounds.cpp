// cuda/key-tile-bounds.h: the per-tile key position bounds the tensor-core attention skips tiles by.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/key-tile-bounds.h"

TEST_CASE("key tile bounds: min and max position of every 32 keys, a short last tile included") {
  std::mt19937 rng(5);
  for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(32), size_t(33), size_t(100)}) {
    CAPTURE(n);
    std::vector<int32_t> pos(n);
    for (int32_t& p : pos) p = int32_t(rng() % 5000);
    std::vector<int32_t> bounds = {-7};  // appended after what is there
    ragkv::append_key_tile_bounds(pos, bounds);
    REQUIRE(bounds.size() == 1 + 2 * ((n + 31) / 32));
    CHECK(bounds[0] == -7);
    for (size_t t = 0; t * 32 < n; ++t) {
      int32_t lo = INT32_MAX, hi = INT32_MIN;
      for (size_t j = t * 32; j < std::min(n, t * 32 + 32); ++j) lo = std::min(lo, pos[j]), hi = std::max(hi, pos[j]);
      CHECK(bounds[1 + 2 * t] == lo);
      CHECK(bounds[2 + 2 * t] == hi);
    }
  }
}
