// store gc: the removal order, the budget walk, and the sweep of dead temporaries and claims.
#include "core/kv/store-gc.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "core/kv/claim-set.h"
#include "core/kv/store-check.h"
#include "core/kv/store-lock.h"
#include "core/kv/variant-ledger.h"
#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

int64_t ns(const timespec& t) { return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec; }

// Every kv/ file's atime and mtime, before gc reads any header.
std::map<std::string, std::pair<timespec, timespec>> file_times(const fs::path& kv) {
  std::map<std::string, std::pair<timespec, timespec>> out;
  std::error_code ec;
  for (fs::directory_iterator it(kv, ec), end; !ec && it != end; it.increment(ec)) {
    struct stat st {};
    if (::stat(it->path().c_str(), &st) == 0) out[it->path().filename().string()] = {st.st_atim, st.st_mtim};
  }
  return out;
}

// Reading a header is not a use: puts back the atime it may have moved (relatime moves it when it
// was not after the mtime), mtime untouched.
void restore_atime(const fs::path& p, const timespec& atime) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0 || ns(st.st_atim) == ns(atime)) return;
  const timespec t[2] = {atime, {0, UTIME_OMIT}};
  ::utimensat(AT_FDCWD, p.c_str(), t, 0);
}

bool claimed_by_live_worker(const fs::path& file) {
  const auto c = inspect_claim(claim_path(file));
  return c && !c->stale();
}

}  // namespace

const char* gc_kind_name(GcKind k) {
  switch (k) {
    case GcKind::bad: return "bad";
    case GcKind::variant: return "variant";
    case GcKind::chain: return "chain";
    case GcKind::canonical: return "canonical";
    case GcKind::prefix: return "prefix";
  }
  return "?";
}

std::vector<GcCandidate> gc_order(const KvStore& store) {
  const fs::path kv = store.dir() / "kv";
  const auto times = file_times(kv);
  const StoreReport rep = inspect_store(store, /*every_layer=*/false);
  for (const StoreFileReport& f : rep.files)
    if (const auto it = times.find(f.name); it != times.end()) restore_atime(kv / f.name, it->second.first);
  std::map<std::string, double> f_r;
  for (const VariantFile& v : list_variant_files_locked(store)) f_r[v.name] = v.frequency_reuse;
  std::vector<GcCandidate> out;
  for (const StoreFileReport& f : rep.files) {
    GcCandidate c;
    c.name = f.name;
    c.bytes = f.bytes;
    if (const auto it = times.find(f.name); it != times.end()) {
      c.mtime_ns = ns(it->second.second);
      c.last_use_ns = std::max(ns(it->second.first), c.mtime_ns);
    }
    if (!f.problem.empty()) c.kind = GcKind::bad;
    else if (f.prefix) c.kind = GcKind::prefix;
    else if (f.name.ends_with(".chain.rkv")) c.kind = GcKind::chain;
    else if (f.variant) c.kind = GcKind::variant;
    else c.kind = GcKind::canonical;
    if (c.kind == GcKind::variant)
      if (const auto it = f_r.find(c.name); it != f_r.end()) c.frequency_reuse = it->second;
    out.push_back(std::move(c));
  }
  std::sort(out.begin(), out.end(), [](const GcCandidate& a, const GcCandidate& b) {
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.kind == GcKind::variant) {  // eviction_order's rule: f_r, then the older file
      if (a.frequency_reuse != b.frequency_reuse) return a.frequency_reuse < b.frequency_reuse;
      if (a.mtime_ns != b.mtime_ns) return a.mtime_ns < b.mtime_ns;
    } else if (a.last_use_ns != b.last_use_ns) {
      return a.last_use_ns < b.last_use_ns;
    }
    return a.name < b.name;
  });
  return out;
}

GcResult collect_garbage(const KvStore& store, const GcOptions& opt) {
  if (store.foreign()) fail("{}: cannot collect a store opened as another model's", store.dir().string());
  const StoreLock lock(store.dir());
  const fs::path kv = store.dir() / "kv";
  GcResult res;
  const std::vector<GcCandidate> order = gc_order(store);
  std::vector<bool> claimed(order.size());
  res.bytes_without_canonical = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    res.bytes_before += order[i].bytes;
    claimed[i] = claimed_by_live_worker(kv / order[i].name);
    if (claimed[i] || order[i].kind >= GcKind::canonical) res.bytes_without_canonical += order[i].bytes;
  }
  uint64_t total = res.bytes_before;
  auto remove = [&](const GcCandidate& c) {
    if (!opt.dry_run) {
      std::error_code ec;
      fs::remove(kv / c.name, ec);
      if (ec) fail("{}: cannot remove: {}", (kv / c.name).string(), ec.message());
    }
    total -= c.bytes;
    res.removed.push_back(c);
  };
  std::vector<bool> gone(order.size());
  if (opt.keep_stems) {  // chunks no kept index uses: every file of theirs, whatever the budget
    for (size_t i = 0; i < order.size(); ++i) {
      const GcCandidate& c = order[i];
      if (c.kind == GcKind::prefix || claimed[i] || opt.keep_stems->count(c.name.substr(0, 16))) continue;
      if (c.kind >= GcKind::canonical) res.bytes_without_canonical -= c.bytes;
      remove(c);
      gone[i] = true;
      ++res.removed_unused;
    }
  }
  // Over budget even without canonical caches, and not allowed them: the budget removes nothing.
  res.needs_canonical = total > opt.max_bytes && res.bytes_without_canonical > opt.max_bytes && !opt.include_canonical;
  for (size_t i = 0; i < order.size() && total > opt.max_bytes && !res.needs_canonical; ++i) {
    const GcCandidate& c = order[i];
    if (gone[i]) continue;
    if (claimed[i]) {
      res.kept_claimed.push_back(c.name);
      continue;
    }
    remove(c);
  }
  res.bytes_after = total;
  res.budget_met = total <= opt.max_bytes;

  // What no one needs: temporaries of dead writers and stale claims (as `store repair` removes;
  // no header read here, so no atime moved).
  std::error_code ec;
  for (fs::directory_iterator it(kv, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path p = it->path();
    const std::string name = p.filename().string();
    if (is_claim_name(name)) {
      const auto c = inspect_claim(p);
      if (!c || !c->stale()) continue;
      ++res.stale_claims;
      if (!opt.dry_run) remove_claim_if_unchanged(p, *c);
    } else if (temporary_owner(p) && is_stale_temporary(p)) {
      ++res.stale_temporaries;
      std::error_code rm;
      if (!opt.dry_run) fs::remove(p, rm);
    }
  }
  if (!opt.dry_run && !res.removed.empty()) prune_variant_usage_locked(store);
  return res;
}

}  // namespace ragkv
