// Work on store files done once across the processes sharing a store (work claimed, not
// duplicated): each item — one chunk's cache, or one variant sequence writing several files —
// is computed only for the files this worker claims (core/kv/claim-set.h). Files claimed by a live other
// are passed over and looked at again once the rest is done: intact by then, they count as the
// other's; still claimed, this worker waits (polling) until they appear or their claim goes stale
// and is taken over. A file is rechecked for being intact right after it is claimed, so one that
// another worker finished and released meanwhile is not computed again.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <vector>

#include "core/kv/claim-set.h"

namespace ragkv {

struct ClaimedWorkStats {
  size_t computed = 0;          // files this worker computed (taken_over included)
  size_t claimed_by_other = 0;  // files another worker computed while this one ran (waited for)
  size_t taken_over = 0;        // files whose stale claim this worker took over, then computed
};

// items[i]: the files item i writes (none intact when called: the caller counts those as skipped).
// intact(f): f is in the store and verifies (KvStore::has_valid). compute(i, files): computes item
// i and writes those of its files (a non-empty subset, in items[i]'s order). progress(done, total)
// counts files, computed or found computed by another.
ClaimedWorkStats run_claimed_work(ClaimSet& claims, const std::vector<std::vector<std::filesystem::path>>& items,
                                  const std::function<bool(const std::filesystem::path&)>& intact,
                                  const std::function<void(size_t, const std::vector<std::filesystem::path>&)>& compute,
                                  const std::function<void(size_t, size_t)>& progress = {});

}  // namespace ragkv
