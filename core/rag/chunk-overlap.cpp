// chunk_overlap: CRAFT §3's Prefix and Total measures in one pass.
#include "core/rag/chunk-overlap.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace ragkv {

ChunkOverlap chunk_overlap(const std::vector<std::vector<std::string>>& requests) {
  struct TrieNode {
    std::map<std::string, size_t> next;
  };
  std::vector<TrieNode> trie(1);                                   // the earlier requests' prefixes
  std::unordered_map<std::string, std::vector<size_t>> holders;    // chunk → earlier requests with it
  std::vector<size_t> shared;                                      // per earlier request, for request i
  ChunkOverlap out;
  double prefix_sum = 0, total_sum = 0;
  size_t seen = 0;
  for (const std::vector<std::string>& r : requests) {
    if (r.empty()) continue;
    const double k = double(r.size());
    // A chunk counted once per request even if a request repeats it.
    std::vector<std::string> distinct = r;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    if (seen > 0) {
      size_t node = 0, lcp = 0;
      for (const std::string& c : r) {
        const auto it = trie[node].next.find(c);
        if (it == trie[node].next.end()) break;
        node = it->second;
        ++lcp;
      }
      size_t best = 0;
      std::vector<size_t> touched;
      for (const std::string& c : distinct)
        if (const auto h = holders.find(c); h != holders.end())
          for (size_t j : h->second) {
            if (shared[j]++ == 0) touched.push_back(j);
            best = std::max(best, shared[j]);
          }
      for (size_t j : touched) shared[j] = 0;
      prefix_sum += double(lcp) / k;
      total_sum += double(best) / k;
    }
    size_t node = 0;
    for (const std::string& c : r) {
      const auto it = trie[node].next.find(c);
      if (it != trie[node].next.end()) {
        node = it->second;
        continue;
      }
      const size_t child = trie.size();
      trie[node].next.emplace(c, child);
      trie.emplace_back();
      node = child;
    }
    for (const std::string& c : distinct) holders[c].push_back(seen);
    shared.push_back(0);
    ++seen;
  }
  out.requests = seen;
  if (seen > 1) {
    out.prefix = prefix_sum / double(seen - 1);
    out.total = total_sum / double(seen - 1);
  }
  return out;
}

}  // namespace ragkv
