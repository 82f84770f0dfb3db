// Claim files: their record, their status, and a ClaimSet's acquire / take over / heartbeat /
// release.
#include "core/kv/claim-set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::string_view kClaimSuffix = ".claim";

int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t unix_ns_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t random_u64() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = [] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd();
  }();
  // splitmix64 of seed + counter: unique within the process, unpredictable across processes
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (counter.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31) ^ uint64_t(::getpid());
}

std::optional<ClaimRecord> read_claim(const fs::path& claim) {
  try {
    return parse_claim(read_regular_file(claim));
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

std::string claim_text(const ClaimRecord& r) {
  return json{{"format", "ragkv-claim"},
              {"host", r.owner.host},
              {"boot_id", r.owner.boot_id},
              {"pid", r.owner.pid},
              {"start_ticks", r.owner.start_ticks},
              {"started_unix_ms", r.started_unix_ms},
              {"lease_s", r.lease_seconds},
              {"token", r.token}}
             .dump() +
         "\n";
}

std::optional<ClaimRecord> parse_claim(std::string_view text) {
  try {
    const json j = json::parse(text);
    if (!j.is_object() || j.value("format", "") != "ragkv-claim") return std::nullopt;
    ClaimRecord r;
    r.owner.host = j.at("host").get<std::string>();
    r.owner.boot_id = j.at("boot_id").get<std::string>();
    r.owner.pid = j.at("pid").get<long>();
    r.owner.start_ticks = j.at("start_ticks").get<uint64_t>();
    r.started_unix_ms = j.at("started_unix_ms").get<int64_t>();
    r.lease_seconds = std::min(j.at("lease_s").get<double>(), kMaxClaimLeaseSeconds);
    r.token = j.at("token").get<std::string>();
    if (!(r.lease_seconds > 0) || r.token.empty()) return std::nullopt;
    return r;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

fs::path claim_path(const fs::path& file) { return file.string() + std::string(kClaimSuffix); }

bool is_claim_name(std::string_view name) {
  return name.size() > 4 + kClaimSuffix.size() && name.ends_with(kClaimSuffix) &&
         name.substr(0, name.size() - kClaimSuffix.size()).ends_with(".rkv");
}

std::optional<ClaimView> inspect_claim(const fs::path& claim) {
  const auto stamp = file_stamp(claim);
  if (!stamp) return std::nullopt;
  ClaimView v;
  v.stamp = *stamp;
  v.record = read_claim(claim);
  const double lease = v.lease_seconds();
  const double age_s = double(unix_ns_now() - stamp->mtime_ns) * 1e-9;
  const ProcessState owner = v.record ? process_state(v.record->owner) : ProcessState::unknown;
  if (owner == ProcessState::gone)
    v.status = ClaimStatus::dead_owner;
  else if (owner == ProcessState::unknown && age_s > 2 * lease)
    v.status = ClaimStatus::expired;
  // (an owner running here is live even when stopped: a waiter that sees its claim unchanged for
  // a lease takes it over, ClaimSet::try_claim)
  return v;
}

double ClaimView::lease_seconds() const {
  return record ? std::min(record->lease_seconds, kMaxClaimLeaseSeconds) : kDefaultClaimLeaseSeconds;
}

std::string ClaimView::describe() const {
  const double age_s = std::max(0.0, double(unix_ns_now() - stamp.mtime_ns) * 1e-9);
  // A waiter takes a claim over when it stays unchanged for a lease, or at twice the lease after
  // its last refresh, whichever comes first.
  const double take_over_s = std::max(0.0, std::min(lease_seconds(), 2 * lease_seconds() - age_s));
  std::string who = "an unreadable claim";
  if (record) {
    const ProcessState st = process_state(record->owner);
    who = fmt::format("pid {} on host {} ({})", record->owner.pid, record->owner.host,
                      st == ProcessState::running ? "running" : st == ProcessState::gone ? "gone" : "another machine");
  }
  return fmt::format("{}, refreshed {:.0f} s ago; taken over in at most {:.0f} s unless refreshed", who, age_s, take_over_s);
}

bool remove_claim_if_unchanged(const fs::path& claim, const ClaimView& seen) {
  const fs::path aside = temporary_path(claim, long(::getpid()), random_u64());
  if (::rename(claim.c_str(), aside.c_str()) != 0) return false;  // gone meanwhile (released, taken)
  const auto now = file_stamp(aside);
  if (now && *now == seen.stamp) {
    ::unlink(aside.c_str());
    return true;
  }
  if (::link(aside.c_str(), claim.c_str()) != 0) {
    // Yet another claim was made meanwhile: the one taken aside is lost to its owner, whose
    // heartbeat notices (duplicate work at worst, never a bad file).
  }
  ::unlink(aside.c_str());
  return false;
}

bool remove_stale_claim_of_finished(const fs::path& file) {
  const fs::path claim = claim_path(file);
  const auto seen = inspect_claim(claim);
  return seen && seen->stale() && remove_claim_if_unchanged(claim, *seen);
}

ClaimSet::ClaimSet(double lease_seconds) : lease_(lease_seconds) {
  if (!(lease_ > 0) || lease_ > kMaxClaimLeaseSeconds)
    fail("claim lease of {} s: must be positive and at most {} s", lease_, kMaxClaimLeaseSeconds);
  heartbeat_ = std::thread([this] { beat(); });
}

ClaimSet::~ClaimSet() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  heartbeat_.join();
  std::vector<fs::path> held;
  for (const auto& [claim, token] : held_) held.push_back(claim);
  for (const fs::path& claim : held) {
    try {
      release(fs::path(claim.string().substr(0, claim.string().size() - kClaimSuffix.size())));
    } catch (...) {  // a destructor must not throw; a claim left behind goes stale by itself
    }
  }
}

double ClaimSet::poll_seconds() const { return std::clamp(lease_ / 20, 0.02, 1.0); }

size_t ClaimSet::lost() const {
  std::lock_guard lk(mu_);
  return lost_;
}

bool ClaimSet::create(const fs::path& claim) {
  ClaimRecord r;
  r.owner = this_process();
  r.started_unix_ms = unix_ms_now();
  r.lease_seconds = lease_;
  r.token = fmt::format("{:016x}", random_u64());
  if (!create_file_exclusive(claim, claim_text(r))) return false;
  std::lock_guard lk(mu_);
  held_[claim] = r.token;
  watched_.erase(claim);
  return true;
}

bool ClaimSet::watched_for_a_lease(const fs::path& claim, const ClaimView& seen) {
  const auto now = std::chrono::steady_clock::now();
  const std::string token = seen.record ? seen.record->token : std::string();
  const double lease = seen.lease_seconds();
  std::lock_guard lk(mu_);
  const auto it = watched_.find(claim);
  if (it == watched_.end() || it->second.stamp != seen.stamp || it->second.token != token) {
    watched_[claim] = Watch{seen.stamp, token, now};  // first seen, or refreshed since: live
    return false;
  }
  return std::chrono::duration<double>(now - it->second.since).count() >= lease;
}

ClaimSet::Result ClaimSet::try_claim(const fs::path& file) {
  const fs::path claim = claim_path(file);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto seen = inspect_claim(claim);
    if (!seen) {
      if (create(claim)) return Result::acquired;
      std::error_code ec;
      if (const auto st = fs::symlink_status(claim, ec); fs::exists(st) && !fs::is_regular_file(st)) {
        // Not a claim ragkv made (a directory, FIFO or link planted at its name): no claim can be
        // made here, and none is needed for correctness — the file is computed unclaimed.
        std::fprintf(stderr, "ragkv: warning: %s is not a regular file: %s computed without a claim\n", claim.c_str(),
                     file.filename().c_str());
        return Result::acquired;
      }
      continue;  // made by another meanwhile: look at it
    }
    if (seen->record) {
      std::lock_guard lk(mu_);
      if (const auto it = held_.find(claim); it != held_.end() && it->second == seen->record->token)
        return Result::acquired;
    }
    if (!seen->stale() && !watched_for_a_lease(claim, *seen)) return Result::held_by_other;
    if (!remove_claim_if_unchanged(claim, *seen)) continue;
    if (create(claim)) return Result::taken_over;
  }
  return Result::held_by_other;
}

void ClaimSet::release(const fs::path& file) {
  const fs::path claim = claim_path(file);
  std::string token;
  {
    std::lock_guard lk(mu_);
    const auto it = held_.find(claim);
    if (it == held_.end()) return;
    token = it->second;
    held_.erase(it);
  }
  const auto r = read_claim(claim);
  if (r && r->token == token) ::unlink(claim.c_str());
}

void ClaimSet::beat() {
  std::unique_lock lk(mu_);
  const auto period = std::chrono::duration<double>(lease_ / 4);
  while (!stop_) {
    wake_.wait_for(lk, period, [this] { return stop_; });
    if (stop_) break;
    const auto held = held_;
    lk.unlock();
    std::vector<std::pair<fs::path, std::string>> lost;
    for (const auto& [claim, token] : held) {
      if (!file_stamp(claim)) continue;  // (renamed aside for a moment by a remover that puts it back)
      const auto r = read_claim(claim);
      if (!r) continue;
      if (r->token != token) {  // taken over (this process was judged stale): not ours to touch
        lost.emplace_back(claim, token);
        continue;
      }
      ::utimensat(AT_FDCWD, claim.c_str(), nullptr, 0);  // mtime = now (the file server's clock on NFS)
    }
    lk.lock();
    for (const auto& [claim, token] : lost)
      if (const auto it = held_.find(claim); it != held_.end() && it->second == token) {
        held_.erase(it);
        ++lost_;
      }
  }
}

}  // namespace ragkv
