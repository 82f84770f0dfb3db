// SpeculativeLoads: longest-common-prefix reconciliation of successive top-k snapshots.
#include "core/rag/speculation.h"

#include <algorithm>

namespace ragkv {

SpeculativeLoads::Change SpeculativeLoads::update(const std::vector<std::string>& items) {
  Change c;
  const size_t n = std::min(items.size(), current_.size());
  while (c.kept < n && items[c.kept] == current_[c.kept]) ++c.kept;
  if (c.kept == items.size() && c.kept == current_.size()) return c;  // unchanged: keep going
  ++speculations_;
  for (size_t i = c.kept; i < current_.size(); ++i) c.stop.push_back(current_[i]);
  if (!c.stop.empty()) ++restarts_;
  for (size_t i = c.kept; i < items.size(); ++i) {
    c.start.push_back(i);
    if (started_.insert(items[i]).second) start_order_.push_back(items[i]);
  }
  current_ = items;
  return c;
}

SpeculativeLoads::Change SpeculativeLoads::finish(const std::vector<std::string>& items) { return update(items); }

std::vector<std::string> SpeculativeLoads::wasted() const {
  std::vector<std::string> out;
  for (const std::string& s : start_order_)
    if (std::find(current_.begin(), current_.end(), s) == current_.end()) out.push_back(s);
  return out;
}

}  // namespace ragkv
