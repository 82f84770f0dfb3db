// KnowledgeTree: prefix matching, RAGCache Algorithm 1 (UPDATE_NODE, EVICT) over three tiers with
// swap-out-only-once and multi-level eviction, on metadata; the Mover moves the bytes.
#include "core/kv/knowledge-tree.h"

#include <algorithm>

#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr std::array<KvTier, kTierCount> kTiers{KvTier::device, KvTier::host, KvTier::disk};
size_t idx(KvTier t) { return size_t(t); }
}  // namespace

int KnowledgeTree::find(std::span<const std::string> path) const {
  if (path.empty()) return -1;
  const auto r = roots_.find(path[0]);
  if (r == roots_.end()) return -1;
  int n = r->second;
  for (size_t i = 1; i < path.size(); ++i) {
    const auto& ch = nodes_[size_t(n)].children;
    const auto c = ch.find(path[i]);
    if (c == ch.end()) return -1;
    n = c->second;
  }
  return n;
}

int KnowledgeTree::add(std::span<const std::string> path, int64_t tokens, uint64_t bytes) {
  if (path.empty()) fail("internal: a knowledge-tree node needs a non-empty path");
  int parent = -1;
  for (size_t i = 0; i < path.size(); ++i) {
    const auto& siblings = parent < 0 ? roots_ : nodes_[size_t(parent)].children;
    if (const auto it = siblings.find(path[i]); it != siblings.end()) {
      parent = it->second;
      continue;
    }
    TreeNode t;
    t.id = path[i];
    t.parent = parent;
    t.depth = int(i);
    t.live = true;
    nodes_.push_back(std::move(t));  // (may move every node: siblings is looked up again below)
    protected_.push_back(0);
    const int child = int(nodes_.size() - 1);
    (parent < 0 ? roots_ : nodes_[size_t(parent)].children).emplace(path[i], child);
    parent = child;
  }
  TreeNode& n = nodes_[size_t(parent)];
  if (n.bytes == 0 && !std::any_of(n.in.begin(), n.in.end(), [](bool b) { return b; })) {
    n.bytes = bytes;
    n.tokens = tokens;
  }
  return parent;
}

std::vector<int> KnowledgeTree::match(std::span<const std::string> path) const {
  std::vector<int> out;
  for (size_t i = 1; i <= path.size(); ++i) {
    const int n = find(path.first(i));
    if (n < 0 || !top_tier(n)) break;
    out.push_back(n);
  }
  return out;
}

std::optional<KvTier> KnowledgeTree::top_tier(int n) const {
  const TreeNode& t = nodes_.at(size_t(n));
  for (KvTier k : kTiers)
    if (t.in[idx(k)]) return k;
  return std::nullopt;
}

std::optional<KvTier> KnowledgeTree::admission_tier() const {
  if (budgets_.bytes[idx(KvTier::device)] > 0) return KvTier::device;
  if (budgets_.bytes[idx(KvTier::host)] > 0) return KvTier::host;
  return std::nullopt;
}

void KnowledgeTree::note_on_disk(int n, bool pinned) {
  TreeNode& t = nodes_.at(size_t(n));
  if (t.in[idx(KvTier::disk)]) return;
  t.in[idx(KvTier::disk)] = true;
  t.pinned_disk = pinned;
  if (!pinned) bytes_[idx(KvTier::disk)] += t.bytes;
  touch(n, KvTier::disk);
}

void KnowledgeTree::forget(int n, KvTier tier) {
  if (!nodes_.at(size_t(n)).in[idx(tier)]) return;
  release(n, tier);
  if (!top_tier(n)) remove_subtree(n);
}

// PGDSF, Formula 4: the mean over the misses of the request's cost per non-cached token; GDSF
// (RAGCache §7.4): cost proportional to size.
double KnowledgeTree::cost_per_size(const TreeNode& n) const {
  if (policy_ == CachePolicy::gdsf) return 1.0;
  return n.cost_samples > 0 ? n.cost_sum / double(n.cost_samples) : 0.0;
}

// Formula 2: Priority = Clock + Frequency × Cost / Size; LRU: the tick of the last use.
double KnowledgeTree::priority_in(const TreeNode& n, KvTier t) const {
  if (policy_ == CachePolicy::lru) return double(n.last_use);
  return clock_[idx(t)] + n.frequency * cost_per_size(n);
}

void KnowledgeTree::touch(int n, KvTier t) {
  TreeNode& node = nodes_[size_t(n)];
  node.priority[idx(t)] = priority_in(node, t);
}

bool KnowledgeTree::is_leaf_in(int n, KvTier t) const {
  for (const auto& [id, c] : nodes_[size_t(n)].children)
    if (nodes_[size_t(c)].in[idx(t)]) return false;
  return true;
}

// Algorithm 1, EVICT_IN_GPU line 15: the lowest-priority leaf of the tier (ties: the least
// recently used, then the older node); never a node of the request being recorded.
int KnowledgeTree::pick_victim(KvTier t) const {
  int best = -1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const TreeNode& n = nodes_[i];
    if (!n.live || !n.in[idx(t)] || !counts_in(n, t) || protected_[i] || !is_leaf_in(int(i), t)) continue;
    if (best < 0) {
      best = int(i);
      continue;
    }
    const TreeNode& b = nodes_[size_t(best)];
    if (n.priority[idx(t)] < b.priority[idx(t)] ||
        (n.priority[idx(t)] == b.priority[idx(t)] && n.last_use < b.last_use))
      best = int(i);
  }
  return best;
}

bool KnowledgeTree::make_room(KvTier t, uint64_t bytes) {
  const uint64_t budget = budgets_.bytes[idx(t)];
  if (bytes > budget) return false;
  while (bytes_[idx(t)] + bytes > budget) {
    const int v = pick_victim(t);
    if (v < 0) return false;
    evict(v, t);
  }
  return true;
}

bool KnowledgeTree::place(int n, KvTier t, std::optional<KvTier> from) {
  if (nodes_.at(size_t(n)).in[idx(t)]) return true;
  TierStats& st = counters_[idx(t)];
  // n itself (and so its copy in `from`) must survive the evictions that make room for it.
  const uint8_t was_protected = protected_[size_t(n)];
  protected_[size_t(n)] = 1;
  const bool room = !counts_in(nodes_[size_t(n)], t) || make_room(t, nodes_[size_t(n)].bytes);
  protected_[size_t(n)] = was_protected;
  if (!room || !nodes_[size_t(n)].live) {
    ++st.rejected;
    return false;
  }
  if (mover_ && !mover_->copy(n, from, t)) return false;
  TreeNode& placed = nodes_[size_t(n)];
  placed.in[idx(t)] = true;
  if (counts_in(placed, t)) bytes_[idx(t)] += placed.bytes;
  ++st.placed;
  touch(n, t);
  return true;
}

// Evicts n from t (Algorithm 1 lines 15–17; RAGCache "swap out only once", "multi-level
// eviction"): Clock = max(Clock, priority); from device memory the node is copied to host memory
// unless host memory holds it already; from host memory a chain node is written to the disk
// store unless it is there already (the disk budget may evict there in turn); then freed.
void KnowledgeTree::evict(int n, KvTier t) {
  TierStats& st = counters_[idx(t)];
  ++st.evicted;
  clock_[idx(t)] = std::max(clock_[idx(t)], nodes_[size_t(n)].priority[idx(t)]);  // Formula 3
  const TreeNode& node = nodes_[size_t(n)];
  if (t == KvTier::device && !node.in[idx(KvTier::host)] && budgets_.bytes[idx(KvTier::host)] > 0) {
    if (place(n, KvTier::host, KvTier::device)) ++st.swapped_out;
  } else if (t == KvTier::host && node.depth >= 2 && !node.in[idx(KvTier::disk)] &&
             budgets_.bytes[idx(KvTier::disk)] > 0) {
    if (place(n, KvTier::disk, KvTier::host)) ++st.swapped_out;
  }
  release(n, t);
  if (!top_tier(n)) remove_subtree(n);
}

void KnowledgeTree::release(int n, KvTier t) {
  TreeNode& node = nodes_[size_t(n)];
  if (!node.in[idx(t)]) return;
  if (mover_) mover_->release(n, t);
  node.in[idx(t)] = false;
  if (counts_in(node, t)) bytes_[idx(t)] -= node.bytes;
}

void KnowledgeTree::remove_subtree(int n) {
  std::vector<int> stack{n};
  while (!stack.empty()) {
    const int m = stack.back();
    stack.pop_back();
    for (const auto& [id, c] : nodes_[size_t(m)].children) stack.push_back(c);
    for (KvTier t : kTiers) release(m, t);
    nodes_[size_t(m)].live = false;
  }
  TreeNode& node = nodes_[size_t(n)];
  auto& siblings = node.parent < 0 ? roots_ : nodes_[size_t(node.parent)].children;
  siblings.erase(node.id);
}

size_t KnowledgeTree::record_request(const std::vector<NodeUse>& uses) {
  for (const NodeUse& u : uses) protected_.at(size_t(u.node)) = 1;
  size_t placed = 0;
  for (const NodeUse& u : uses) {
    TreeNode& n = nodes_[size_t(u.node)];
    if (!n.live) continue;
    // Algorithm 1, UPDATE_NODE: frequency, and the cost when the node was not in memory.
    n.frequency += 1;
    n.last_use = ++tick_;
    if (!u.served_from || *u.served_from == KvTier::disk) {
      n.cost_sum += u.cost_per_token;
      ++n.cost_samples;
    }
    for (KvTier t : kTiers)
      if (n.in[idx(t)]) touch(u.node, t);
    const bool computed = !u.served_from;
    if (computed && !u.admit) continue;
    // The highest memory tier that takes it (device memory may be full of this request's own
    // nodes); a computed chain node that no memory tier takes goes straight to the store.
    const std::optional<KvTier> from = top_tier(u.node);
    bool ok = false;
    for (KvTier t : {KvTier::device, KvTier::host})
      if (!ok && budgets_.bytes[idx(t)] > 0) ok = place(u.node, t, from);
    if (!ok && computed && nodes_[size_t(u.node)].depth >= 2 && budgets_.bytes[idx(KvTier::disk)] > 0)
      ok = place(u.node, KvTier::disk, from);
    placed += ok;
  }
  for (const NodeUse& u : uses) protected_[size_t(u.node)] = 0;
  return placed;
}

TierStats KnowledgeTree::stats(KvTier t) const {
  TierStats s = counters_[idx(t)];
  s.bytes = bytes_[idx(t)];
  s.budget = budgets_.bytes[idx(t)];
  s.clock = clock_[idx(t)];
  s.nodes = size_t(std::count_if(nodes_.begin(), nodes_.end(), [&](const TreeNode& n) { return n.live && n.in[idx(t)]; }));
  return s;
}

int64_t KnowledgeTree::cached_tokens(std::span<const std::string> path) const {
  int64_t n = 0;
  for (int m : match(path)) n += nodes_[size_t(m)].tokens;
  return n;
}

}  // namespace ragkv
