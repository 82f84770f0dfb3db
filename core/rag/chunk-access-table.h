// CRAFT's CA-Table (craft-chunk-reordering.txt §4, "Table Update and Maintenance"): access counts
// of the chunks retrieved by the last `window` requests (a sliding window; a chunk no request in
// the window retrieved has no entry). It decides two things:
//   * the promotion threshold of the CP-Tree: chunk i of a request may become a knowledge-tree
//     node only when chunks 1..i all reach the threshold (CRAFT's default 2; 1 admits every
//     computed prefix, as RAGCache does);
//   * frequency chunk order (opt-in): a request's chunks sorted by access count, most accessed
//     first (ties keep the retrieval order), so chunks shared by many requests align as prefixes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace ragkv {

// v's elements in the order of `order` (a permutation of v's indices, e.g. frequency_order's).
template <class T>
std::vector<T> permuted(const std::vector<T>& v, const std::vector<size_t>& order) {
  std::vector<T> out;
  out.reserve(order.size());
  for (size_t i : order) out.push_back(v.at(i));
  return out;
}

inline constexpr size_t kDefaultCaWindow = 1000;  // requests in the window (answer's --ca-window)

class ChunkAccessTable {
 public:
  ChunkAccessTable(size_t window, int64_t promotion_threshold);
  // A request retrieved these chunks: each count + 1; the request leaving the window − 1.
  void record(const std::vector<std::string>& chunks);
  int64_t count(const std::string& chunk) const;
  // Per chunk of the request (in prompt order): whether the prefix up to it is promoted.
  std::vector<uint8_t> promoted(const std::vector<std::string>& chunks) const;
  // The permutation of chunks (indices) in frequency order, ties in the given order.
  std::vector<size_t> frequency_order(const std::vector<std::string>& chunks) const;
  // One request's admission, as answer, eval and bench cache all make it (CRAFT §4): the order its
  // chunks take in the prompt (frequency order when freq_order, else as retrieved, both before
  // this request is counted), then the request counted, then, with a promotion threshold above 1,
  // per chunk of that order whether the CP-Tree may take the prefix up to it (empty: every prefix).
  struct Admission {
    std::vector<size_t> order;
    std::vector<uint8_t> promote;
  };
  Admission admit(const std::vector<std::string>& chunks, bool freq_order);
  size_t entries() const { return counts_.size(); }

 private:
  size_t window_;
  int64_t threshold_;
  std::deque<std::vector<std::string>> requests_;
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace ragkv
