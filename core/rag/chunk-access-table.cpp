// ChunkAccessTable: sliding-window access counts, CP-Tree promotion and frequency order (CRAFT §4).
#include "core/rag/chunk-access-table.h"

#include <algorithm>
#include <numeric>

#include "core/util/error.h"

namespace ragkv {

ChunkAccessTable::ChunkAccessTable(size_t window, int64_t promotion_threshold)
    : window_(window), threshold_(promotion_threshold) {
  if (window_ == 0) fail("the CA-Table's window must hold at least one request");
}

void ChunkAccessTable::record(const std::vector<std::string>& chunks) {
  requests_.push_back(chunks);
  for (const std::string& c : chunks) ++counts_[c];
  while (requests_.size() > window_) {
    for (const std::string& c : requests_.front())
      if (const auto it = counts_.find(c); it != counts_.end() && --it->second <= 0) counts_.erase(it);
    requests_.pop_front();
  }
}

int64_t ChunkAccessTable::count(const std::string& chunk) const {
  const auto it = counts_.find(chunk);
  return it == counts_.end() ? 0 : it->second;
}

std::vector<uint8_t> ChunkAccessTable::promoted(const std::vector<std::string>& chunks) const {
  std::vector<uint8_t> out(chunks.size(), 0);
  for (size_t i = 0; i < chunks.size() && count(chunks[i]) >= threshold_; ++i) out[i] = 1;
  return out;
}

ChunkAccessTable::Admission ChunkAccessTable::admit(const std::vector<std::string>& chunks, bool freq_order) {
  Admission a;
  if (freq_order) {
    a.order = frequency_order(chunks);
  } else {
    a.order.resize(chunks.size());
    std::iota(a.order.begin(), a.order.end(), size_t(0));
  }
  record(chunks);
  if (threshold_ > 1) a.promote = promoted(permuted(chunks, a.order));
  return a;
}

std::vector<size_t> ChunkAccessTable::frequency_order(const std::vector<std::string>& chunks) const {
  std::vector<size_t> order(chunks.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return count(chunks[a]) > count(chunks[b]); });
  return order;
}

}  // namespace ragkv
