// The claimed-work loop: a first pass over the items, then waiting for what others hold.
#include "core/kv/claimed-work.h"

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

namespace ragkv {

namespace fs = std::filesystem;

namespace {

// One line per file another worker holds (the first few), saying whose claim it is and when it
// will be taken over: a wait is never silent.
void announce_waits(const std::vector<std::pair<size_t, std::vector<fs::path>>>& waiting) {
  constexpr size_t kShown = 3;
  size_t n = 0, shown = 0;
  for (const auto& [i, files] : waiting)
    for (const fs::path& f : files) {
      ++n;
      if (shown == kShown) continue;
      const fs::path claim = claim_path(f);
      if (const auto seen = inspect_claim(claim)) {
        std::fprintf(stderr, "ragkv: waiting for %s: claimed by %s\n", claim.c_str(), seen->describe().c_str());
        ++shown;
      }
    }
  if (n > shown) std::fprintf(stderr, "ragkv: waiting for %zu files other workers claimed\n", n);
}

}  // namespace

ClaimedWorkStats run_claimed_work(ClaimSet& claims, const std::vector<std::vector<fs::path>>& items,
                                  const std::function<bool(const fs::path&)>& intact,
                                  const std::function<void(size_t, const std::vector<fs::path>&)>& compute,
                                  const std::function<void(size_t, size_t)>& progress) {
  ClaimedWorkStats st;
  size_t total = 0, done = 0;
  for (const auto& files : items) total += files.size();
  if (progress) progress(0, total);

  // Claims what it can of item i's files (those in `files`); computes those still missing; returns
  // the ones another worker holds.
  auto work_on = [&](size_t i, const std::vector<fs::path>& files) {
    std::vector<fs::path> mine, others;
    size_t taken = 0;
    for (const fs::path& f : files) {
      const ClaimSet::Result r = claims.try_claim(f);
      if (r == ClaimSet::Result::held_by_other) {
        others.push_back(f);
      } else if (intact(f)) {  // finished by another after the caller (or the last round) looked
        claims.release(f);
        ++st.claimed_by_other;
        ++done;
      } else {
        mine.push_back(f);
        taken += r == ClaimSet::Result::taken_over;
      }
    }
    if (!mine.empty()) {
      compute(i, mine);  // (on an exception the ClaimSet's owner releases the claims)
      for (const fs::path& f : mine) claims.release(f);
      st.computed += mine.size();
      st.taken_over += taken;
      done += mine.size();
    }
    if (progress && files.size() != others.size()) progress(done, total);
    return others;
  };

  std::vector<std::pair<size_t, std::vector<fs::path>>> waiting;  // item, its files others hold
  for (size_t i = 0; i < items.size(); ++i)
    if (auto others = work_on(i, items[i]); !others.empty()) waiting.emplace_back(i, std::move(others));

  const auto poll = std::chrono::duration<double>(claims.poll_seconds());
  constexpr auto kAnnounceEvery = std::chrono::seconds(30);
  auto announced = std::chrono::steady_clock::now() - kAnnounceEvery;
  while (!waiting.empty()) {
    if (std::chrono::steady_clock::now() - announced >= kAnnounceEvery) {
      announce_waits(waiting);
      announced = std::chrono::steady_clock::now();
    }
    std::vector<std::pair<size_t, std::vector<fs::path>>> still;
    for (auto& [i, files] : waiting) {
      std::vector<fs::path> open;
      for (const fs::path& f : files) {
        if (intact(f)) {
          ++st.claimed_by_other;
          ++done;
        } else {
          open.push_back(f);
        }
      }
      if (open.size() != files.size() && progress) progress(done, total);
      if (open.empty()) continue;
      if (auto others = work_on(i, open); !others.empty()) still.emplace_back(i, std::move(others));
    }
    waiting = std::move(still);
    if (!waiting.empty()) std::this_thread::sleep_for(poll);
  }
  return st;
}

}  // namespace ragkv
