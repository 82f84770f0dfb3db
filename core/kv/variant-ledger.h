// The bookkeeping of a store's Cache-Craft variants (cache-craft.txt §3.3; DESIGN.md §4 "Cache
// management"): the store's craft settings (α as Eq. 13 fitted it, the variant budget) in
// STORE/craft.json, the frequency-reuse score of every variant (f_r += 1/CFO per use) in
// STORE/variant-usage.json, and admission under the budget — before a variant is written, the
// variants with the lowest f_r are evicted until it fits, so the store never holds more than the
// budget. Every read-modify-write of these files and every admission runs under an exclusive
// flock on STORE/variants.lock, so processes sharing a store neither lose a use nor overshoot the
// budget (core/kv/store-lock.h; flock is local to one machine, on a network file system it may not exclude).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kv/kv-store.h"

namespace ragkv {

// At most this many variant files and bytes of them (0: no limit). Canonical caches are not
// counted: they are precompute's, and `store gc` (reliability) manages them.
struct VariantBudget {
  size_t max_variants = 0;
  uint64_t max_bytes = 0;
  bool limited() const { return max_variants > 0 || max_bytes > 0; }
};

// STORE/craft.json.
struct CraftStoreSettings {
  std::optional<double> alpha;  // fitted by `eval --fit-alpha` (Eq. 13)
  nlohmann::json alpha_fit;     // how: queries, criterion, candidates (for people)
  std::string fallback;         // auto's margin-fallback rule "M[/C]" ("0": none), fitted by `eval --fit-fallback`; "": not fitted
  nlohmann::json fallback_fit;  // how, as alpha_fit
  VariantBudget budget;
};
CraftStoreSettings read_craft_settings(const KvStore& store);  // defaults when the file is missing
void write_craft_settings(const KvStore& store, const CraftStoreSettings& s);  // atomic, under the lock

// One variant file in kv/ (name only).
struct VariantFile {
  std::string name;
  uint64_t bytes = 0;
  double frequency_reuse = 0;  // f_r
  int64_t mtime_ns = 0;
};

// Eviction order (Cache-Craft §3.3): lowest f_r first; ties: the older file, then the name.
std::vector<VariantFile> eviction_order(std::vector<VariantFile> files);

// For callers that hold the StoreLock (core/kv/store-lock.h) themselves (`store gc`): the variant files
// with their f_r, and dropping from variant-usage.json the scores of variants no longer on disk.
std::vector<VariantFile> list_variant_files_locked(const KvStore& store);
void prune_variant_usage_locked(const KvStore& store);

class VariantLedger {
 public:
  explicit VariantLedger(const KvStore& store);
  ~VariantLedger();  // flushes what it can (errors are dropped)
  VariantLedger(const VariantLedger&) = delete;
  VariantLedger& operator=(const VariantLedger&) = delete;

  // A use of the variant file `name` at this CFO: f_r += 1/max(CFO, 0.01) (an exact chain, CFO 0,
  // counts 100). Kept in memory until flush().
  void record_use(const std::string& name, double cfo);
  // Adds the uses recorded since the last flush to STORE/variant-usage.json.
  void flush();

  // Writes a variant of `bytes` bytes through `write` (which must create the file atomically)
  // after evicting the lowest-f_r variants until it fits the budget. False (nothing written) when
  // it cannot fit even in an empty budget. Evicted names are appended to *evicted.
  bool admit(uint64_t bytes, const std::function<void()>& write, std::vector<std::string>* evicted = nullptr);

  // The variant files of the store with their f_r, from disk (under the lock).
  std::vector<VariantFile> files() const;

 private:
  const KvStore& store_;
  std::map<std::string, double> pending_;
};

}  // namespace ragkv
