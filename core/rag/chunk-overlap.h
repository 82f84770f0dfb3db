// CRAFT's measures of chunk overlap across a sequence of requests (craft-chunk-reordering.txt §3,
// "Chunk overlap"): each request against the requests before it, since reuse can only come from
// earlier computation.
//   Prefix = 1/(N−1) Σ_{i≥2} max_{j<i} LCP(R_i, R_j) / k   (what prefix caching can reuse)
//   Total  = 1/(N−1) Σ_{i≥2} max_{j<i} |R_i ∩ R_j| / k      (what any position-free reuse could)
// k is the request's own chunk count (the paper's requests all retrieve k chunks; dedup and
// failed retrievals make ours vary). The gap between the two is what reordering can recover.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ragkv {

struct ChunkOverlap {
  double prefix = 0;    // CRAFT's Prefix
  double total = 0;     // CRAFT's Total
  size_t requests = 0;  // N (requests with no chunks are skipped)
};

// The measures over `requests` in the order given (each a prompt's chunk ids in prompt order).
// Linear in the total postings: a trie of earlier requests for the LCP, an inverted index for the
// intersections.
ChunkOverlap chunk_overlap(const std::vector<std::vector<std::string>>& requests);

}  // namespace ragkv
