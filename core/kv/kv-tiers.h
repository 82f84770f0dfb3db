// Where a prompt finds a chunk cache (RAGCache §4–5.1, DESIGN.md §4 "Cache management"): device
// memory, then host memory, then the store on disk. Each lookup returns the segment's KV feed
// (core/kv/segment-kv.h) from the highest tier holding it, so hits are counted per tier where they
// happen.
//
// With a configuration (budgets per tier and a replacement policy), the tiers are RAGCache's
// cache manager: a knowledge tree (core/kv/knowledge-tree.h) over the prefix, the canonical chunk
// caches and the exact chain nodes decides what each tier keeps — after each prompt the segments
// it used move up to the top memory tier and the ones it computed exactly are admitted, evicted
// under PGDSF, GDSF or LRU with swap-out-only-once, down to the store, whose chain-node files it
// manages within the disk budget. Cache-Craft's approximate variants are read from the store and
// kept by Cache-Craft's own budget (core/kv/variant-ledger.h), not here.
// Without one, copies are only placed explicitly (`place`, as `bench reuse` does).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/kv/cache-policy.h"
#include "core/kv/knowledge-tree.h"
#include "core/kv/kv-store.h"
#include "core/kv/segment-kv.h"

namespace ragkv {

struct KvTierConfig {
  CachePolicy policy = CachePolicy::pgdsf;
  TierBudgets budgets;  // device, host, disk (the disk's counts the chain nodes the tiers wrote)
};

// One knowledge-tree segment of a prompt, in prompt order, as the answerer used it.
struct PromptNode {
  ChunkKvMeta key;                    // its store key (a chain node's context and exact_chain set)
  std::optional<KvTier> served_from;  // nullopt: computed by this prompt (exactly, at its position)
  double cost_per_token = 0;          // what it cost this prompt per token when not in memory
  int64_t row = 0;                    // its first row in the prompt's KV
  bool admit = true;                  // computed: may enter the tree (CRAFT's promotion threshold)
};

class KvTiers : private KnowledgeTree::Mover {
 public:
  // Explicit placement only.
  explicit KvTiers(const KvStore& store);
  // The cache manager; backend holds the device tier. With a disk budget, lists the store's
  // chain-node files (their headers verified; bad ones are counted, never used) and evicts down to
  // that budget; without one, the store's chain files are only read (pinned, as precompute's are).
  KvTiers(const KvStore& store, const KvTierConfig& config, Backend& backend);
  ~KvTiers() override;
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  // key's KV from the highest tier that holds it; nullptr when none does (or the store belongs to
  // another model); CacheFileError when only the store has it and its file fails its header checks.
  std::shared_ptr<const SegmentKv> find(const ChunkKvMeta& key) const;
  // Keeps a verified copy of key's KV in host memory (offered to `backend`, when given, for
  // direct uploads: Backend::pin_host_memory), or in `backend`'s memory for the device tier; a
  // no-op when that tier already holds it. Error when the store has no file for key;
  // CacheFileError when the file fails its checks (nothing is kept then). Outside any budget.
  void place(const ChunkKvMeta& key, KvTier tier, Backend* backend = nullptr);
  // Drops key's copies from the memory tiers (e.g. after they failed to load).
  void drop(const ChunkKvMeta& key);
  // A cache that failed while loading: dropped from every tier; a chain node's file (the tiers'
  // own) is deleted, so the next prompt that needs it computes and admits it again.
  void discard(const ChunkKvMeta& key);
  uint64_t bytes(KvTier tier) const;  // bytes of KV held in a memory tier (0 for disk)
  const KvStore& store() const { return store_; }

  bool managed() const { return tree_ != nullptr; }
  // After a prompt (RAGCache Algorithm 1): every tree segment it used or computed exactly, in
  // prompt order; computed ones are copied from rows of the prompt's KV (k, v: per layer) when
  // admitted. The disk copies the tiers write are chain nodes only (depth ≥ 2).
  void record_prompt(const std::vector<PromptNode>& nodes, const std::vector<Tensor>& k,
                     const std::vector<Tensor>& v);
  const KnowledgeTree* tree() const { return tree_.get(); }
  PrefillCostModel& cost() { return cost_; }
  const PrefillCostModel& cost() const { return cost_; }
  // The tree path of a store key: "@prefix"-rooted segment ids (the prefix alone for the prefix).
  static std::vector<std::string> tree_path(const ChunkKvMeta& key);
  size_t bad_files() const { return bad_files_; }  // chain files skipped when listing the store
  uint64_t bytes_written() const { return bytes_written_; }
  size_t write_failures() const { return write_failures_; }
  const std::string& first_write_error() const { return first_write_error_; }

 private:
  std::string address(const ChunkKvMeta& key) const;  // the content address in the store
  bool copy(int n, std::optional<KvTier> from, KvTier to) override;
  void release(int n, KvTier tier) override;
  int node_for(const ChunkKvMeta& key, uint64_t bytes);
  void list_chain_files();

  const KvStore& store_;
  Backend* backend_ = nullptr;
  std::map<std::string, std::shared_ptr<const SegmentKv>> device_, host_;
  std::unique_ptr<KnowledgeTree> tree_;
  std::vector<ChunkKvMeta> node_key_;  // per tree node
  PrefillCostModel cost_;
  // The prompt being recorded: its KV rows, for the nodes it computed.
  const std::vector<Tensor>* rows_k_ = nullptr;
  const std::vector<Tensor>* rows_v_ = nullptr;
  std::map<int, int64_t> row_of_;
  size_t bad_files_ = 0, write_failures_ = 0;
  std::string first_write_error_;
  uint64_t bytes_written_ = 0;
};

}  // namespace ragkv
