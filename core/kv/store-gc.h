// `ragkv store gc`: a store's chunk-cache files shrunk to a byte budget by the store's
// eviction policy. What goes first is what is worth least:
//   1. files that cannot serve (a header that fails, another model's or shape's, misnamed);
//   2. Cache-Craft variants, lowest frequency-reuse f_r first (cache-craft.txt §3.3, the order
//      the variant budget already evicts in: core/kv/variant-ledger.h);
//   3. knowledge-tree chain nodes (RAGCache §5.1), least recently used first — their PGDSF
//      priority lives in the answering process and is not persisted, so the file's last use
//      stands in: the later of its atime (kept by relatime file systems) and mtime;
//   4. canonical chunk caches, least recently used first, and the instruction prefix last —
//      only with include_canonical: they are precompute's, and every prompt starts from them.
// A file another live worker claims (core/kv/claim-set.h) is never removed. When the budget cannot be
// met without canonical caches and include_canonical is not given, nothing is removed and the
// result says so. The whole collection runs under the StoreLock (core/kv/store-lock.h), so variant
// admission in other processes waits for it; dead writers' temporaries and stale claims go too.
// The budget counts kv/*.rkv files (the bytes `store stats` reports).
//
// With keep_stems (`store gc --keep-index INDEX…`: the content keys of every chunk the named
// indexes hold), every file of a chunk no index uses any more — its canonical cache, variants and
// knowledge-tree nodes, and bad files — goes first, whatever the budget; the prefix stays.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/kv/kv-store.h"

namespace ragkv {

enum class GcKind { bad, variant, chain, canonical, prefix };  // in removal order
const char* gc_kind_name(GcKind k);

struct GcCandidate {
  std::string name;  // under kv/
  GcKind kind = GcKind::canonical;
  uint64_t bytes = 0;
  double frequency_reuse = 0;  // variants: f_r
  int64_t last_use_ns = 0;     // max(atime, mtime)
  int64_t mtime_ns = 0;
};

// Every kv/*.rkv file in removal order (the caller holds the StoreLock).
std::vector<GcCandidate> gc_order(const KvStore& store);

struct GcOptions {
  uint64_t max_bytes = UINT64_MAX;
  bool include_canonical = false;
  bool dry_run = false;  // decide, report, remove nothing
  // The 16-hex stems (KvStore::chunk_path) of the chunks to keep; nullopt: keep every chunk.
  std::optional<std::set<std::string>> keep_stems;
};

struct GcResult {
  uint64_t bytes_before = 0, bytes_after = 0;
  std::vector<GcCandidate> removed;       // in the order removed
  size_t removed_unused = 0;              // of them, files of chunks no kept index uses (first)
  std::vector<std::string> kept_claimed;  // next in line, but claimed by a live worker
  uint64_t bytes_without_canonical = 0;   // what is left when every other unclaimed file goes
  bool budget_met = false;
  bool needs_canonical = false;  // over budget without canonical caches, and not allowed them: nothing removed
  size_t stale_temporaries = 0, stale_claims = 0;  // removed (or, dry run, found)
};

GcResult collect_garbage(const KvStore& store, const GcOptions& opt);

}  // namespace ragkv
