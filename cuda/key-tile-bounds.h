// The smallest and largest key position of each tile of kKeyTileKeys consecutive key rows: what
// the tensor-core attention kernel's tile skipping compares its block's query positions against
// (attention-mma.cu), computed on the host beside the key positions it uploads, so that the kernel
// reads two numbers per tile instead of reducing a tile's positions over a warp, and can test 32
// tiles at once when it looks for the next one a block sees. Plain C++: the CUDA backend builds
// it, tests/test-key-tile-bounds.cpp checks it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace ragkv {

inline constexpr int kKeyTileKeys = 32;

// out[2t], out[2t + 1] = min and max of k_pos over rows [32t, min(32t + 32, n)): ⌈n / 32⌉ pairs,
// appended to out.
inline void append_key_tile_bounds(std::span<const int32_t> k_pos, std::vector<int32_t>& out) {
  for (size_t t0 = 0; t0 < k_pos.size(); t0 += kKeyTileKeys) {
    const auto tile = k_pos.subspan(t0, std::min<size_t>(kKeyTileKeys, k_pos.size() - t0));
    const auto [lo, hi] = std::minmax_element(tile.begin(), tile.end());
    out.push_back(*lo);
    out.push_back(*hi);
  }
}

}  // namespace ragkv
