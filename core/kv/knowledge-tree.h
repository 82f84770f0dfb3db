// RAGCache's knowledge tree (§5.1, Fig. 10, Algorithm 1) over ragkv's three KV tiers: device
// memory, host memory and the disk store. A node is a prompt segment computed exactly after the
// segments on its path from the root (the instruction prefix): the prefix, a chunk's canonical
// cache at depth 1, a chain node below (core/kv/chunk-kv-file.h, exact_chain). A path hit is an exact
// prefix of a prompt.
//
// This class holds metadata only — which tiers hold a node, its size, frequency, cost and
// priority — and makes every placement decision; a Mover (core/kv/kv-tiers.h) moves the bytes. Without
// a mover it is a simulator of the same decisions (the query scheduler and `bench cache` use it).
//   * Each tier has a byte budget that is never exceeded (the disk's counts the nodes this tree
//     wrote: precompute's canonical caches are pinned there and not counted).
//   * Replacement (core/kv/cache-policy.h): PGDSF, GDSF or LRU among the tier's leaves — nodes none of
//     whose children are in that tier (Algorithm 1, EVICT_IN_GPU), so parents stay above their
//     children; Clock = the largest priority evicted (Formula 3).
//   * Swap out only once: a node evicted from device memory is copied to host memory only when
//     host memory does not hold it yet, else just freed; likewise host → disk. Multi-level
//     eviction: making room in host memory for a swapped-out node may evict there in turn.
//   * A node held by no tier is removed with its subtree (nothing below it is reachable).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/kv/cache-policy.h"
#include "core/kv/segment-kv.h"

namespace ragkv {

inline constexpr size_t kTierCount = 3;  // KvTier::device, host, disk

struct TierBudgets {
  std::array<uint64_t, kTierCount> bytes{0, 0, 0};  // per KvTier; 0: the tier holds nothing
};

struct TreeNode {
  std::string id;                     // the segment's id ("@prefix", a chunk id)
  int parent = -1;                    // -1: a root
  std::map<std::string, int> children;
  int depth = 0;                      // 0 for a root
  uint64_t bytes = 0;                 // of its K and V
  int64_t tokens = 0;
  std::array<bool, kTierCount> in{};  // held by device, host, disk
  bool pinned_disk = false;           // a disk copy the tree does not manage (precompute's)
  double frequency = 0;               // uses so far (RAGCache's Frequency)
  double cost_sum = 0;                // Σ Cost_i / NewSize_i over the uses that missed memory (Formula 4)
  int64_t cost_samples = 0;
  std::array<double, kTierCount> priority{};  // per tier, set when used or placed (Formula 2)
  uint64_t last_use = 0;              // LRU's tick
  bool live = false;
};

// One tree node a request used or computed, in prompt order (parents before children).
struct NodeUse {
  int node = -1;
  std::optional<KvTier> served_from;  // nullopt: computed by this request
  double cost_per_token = 0;          // Cost_i / NewSize_i: what the node cost this request per
                                      // token when it was not in memory (computed or read from disk)
  bool admit = true;                  // a computed node may enter the tree (CRAFT's promotion
                                      // threshold may say not yet)
};

struct TierStats {
  uint64_t bytes = 0, budget = 0;
  size_t nodes = 0;
  size_t placed = 0;      // copies made into this tier (admissions, promotions, swap-outs)
  size_t evicted = 0;     // nodes evicted from this tier
  size_t swapped_out = 0; // evictions that copied the node one tier down (once per node and tier)
  size_t rejected = 0;    // placements that could not fit within the budget
  double clock = 0;
};

class KnowledgeTree {
 public:
  // Executes the tree's decisions on real KV; every call is made before the metadata changes.
  class Mover {
   public:
    virtual ~Mover() = default;
    // Copy node n into tier `to`, from tier `from` (nullopt: from the current prompt's rows).
    // Returns false when the copy failed (e.g. the source file is bad): the node is not placed.
    virtual bool copy(int n, std::optional<KvTier> from, KvTier to) = 0;
    virtual void release(int n, KvTier tier) = 0;  // free n's copy in that tier
  };

  KnowledgeTree(CachePolicy policy, TierBudgets budgets) : policy_(policy), budgets_(budgets) {}
  void set_mover(Mover* m) { mover_ = m; }
  CachePolicy policy() const { return policy_; }
  const TierBudgets& budgets() const { return budgets_; }

  // The node at path (segment ids from the root), -1 when the tree has none.
  int find(std::span<const std::string> path) const;
  // The node at path, created (held by no tier) together with missing ancestors.
  int add(std::span<const std::string> path, int64_t tokens, uint64_t bytes);
  // The nodes of the longest prefix of path held by some tier (RAGCache's prefix matching).
  std::vector<int> match(std::span<const std::string> path) const;
  const TreeNode& node(int n) const { return nodes_.at(size_t(n)); }
  size_t size() const { return nodes_.size(); }
  // The highest tier holding n, nullopt when none does.
  std::optional<KvTier> top_tier(int n) const;
  // The memory tier new and used nodes go to: device when it has a budget, else host, else none.
  std::optional<KvTier> admission_tier() const;

  // A copy that exists outside the tree's decisions: a disk file found in the store (pinned:
  // precompute's, outside the disk budget; else the tree's own, which the budget counts).
  void note_on_disk(int n, bool pinned);
  // Forget n's copy in a tier (it failed to load); the node goes when no tier holds it.
  void forget(int n, KvTier tier);

  // RAGCache Algorithm 1 for one request, in prompt order: each used node's frequency and cost
  // (UPDATE_NODE), then the node placed in the admission tier, evicting the lowest-priority
  // leaves there (EVICT) — never a node of this request. A computed node enters only when its
  // use says `admit`. Returns how many were placed.
  size_t record_request(const std::vector<NodeUse>& uses);

  // Makes n held by tier t within its budget; false when it cannot fit (nothing of n changes).
  bool place(int n, KvTier t, std::optional<KvTier> from);
  // Evicts from tier t until `bytes` more fit, or false.
  bool make_room(KvTier t, uint64_t bytes);

  TierStats stats(KvTier t) const;
  uint64_t bytes(KvTier t) const { return bytes_[size_t(t)]; }
  // Σ tokens of the nodes of path's longest held prefix, per tier of the node (for scheduling).
  int64_t cached_tokens(std::span<const std::string> path) const;

 private:
  double cost_per_size(const TreeNode& n) const;  // Formula 4 (PGDSF), 1 (GDSF)
  double priority_in(const TreeNode& n, KvTier t) const;
  void touch(int n, KvTier t);                    // sets n's priority in t
  bool is_leaf_in(int n, KvTier t) const;
  int pick_victim(KvTier t) const;
  void evict(int n, KvTier t);
  void release(int n, KvTier t);
  void remove_subtree(int n);
  bool counts_in(const TreeNode& n, KvTier t) const { return t != KvTier::disk || !n.pinned_disk; }

  CachePolicy policy_;
  TierBudgets budgets_;
  Mover* mover_ = nullptr;
  std::vector<TreeNode> nodes_;
  std::map<std::string, int> roots_;
  std::array<uint64_t, kTierCount> bytes_{};
  std::array<double, kTierCount> clock_{};
  std::array<TierStats, kTierCount> counters_{};
  uint64_t tick_ = 0;
  std::vector<uint8_t> protected_;  // per node: used by the request being recorded
};

}  // namespace ragkv
