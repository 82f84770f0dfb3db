// Claims on store files (work claimed, not duplicated): before a process computes a
// chunk cache that others sharing the store may also want, it claims the file — creates
// "<file>.claim" exclusively (core/util/file-io.h create_file_exclusive: link(2), safe on NFS too),
// holding one JSON line: host, boot id, pid and its start time, when, the lease, a token. While
// it works, a heartbeat thread refreshes the claim's mtime every lease/4; when the file is written
// the claim is removed. Another process that finds a chunk claimed computes other chunks and
// comes back to it at the end.
//
// A claim is stale, and taken over, when
//   * its owner ran on this machine (same host and boot id) and is gone (pid free or reused), or
//   * its mtime is older than twice its lease by this machine's clock (machines sharing a file
//     system keep their clocks far closer than a lease), or
//   * a waiter saw it unchanged (size, mtime, inode, token) for a whole lease by its own clock —
//     which needs no agreement between clocks at all (another machine's claim, a stopped process).
// Taking over renames the stale claim to a temporary name of the taker's, checks it is the file
// judged stale (else puts it back), removes it and creates the taker's own. A claim is never
// needed for correctness — every chunk file is content-addressed, written whole and renamed into
// place, and verified when used — so a claim wrongly taken over costs duplicate work, never a bad
// file; and a stale claim never blocks work for good.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "core/kv/verified-record.h"
#include "core/util/process-identity.h"

namespace ragkv {

inline constexpr double kDefaultClaimLeaseSeconds = 120;
// The longest lease a claim may hold another worker to: a claim file that says more (or a
// --claim-lease above it) counts this much, so no claim file can stall a waiter for longer than
// twice it.
inline constexpr double kMaxClaimLeaseSeconds = 3600;

// The content of a claim file.
struct ClaimRecord {
  ProcessIdentity owner;
  int64_t started_unix_ms = 0;                       // when the claim was made (for people)
  double lease_seconds = kDefaultClaimLeaseSeconds;  // the owner refreshes the mtime every lease/4
  std::string token;                                 // unique to this claim
};
std::string claim_text(const ClaimRecord& r);                   // one JSON line, '\n'-terminated
std::optional<ClaimRecord> parse_claim(std::string_view text);  // nullopt: not a ragkv claim

// "<file>.claim", beside the file it claims.
std::filesystem::path claim_path(const std::filesystem::path& file);
// A claim's name: "<name>.rkv.claim".
bool is_claim_name(std::string_view name);

enum class ClaimStatus {
  live,        // its owner runs here, or may run elsewhere and refreshed it lately
  dead_owner,  // its owner ran on this machine and boot and is gone
  expired,     // its mtime is older than twice its lease (a file that does not parse: the default lease)
};
struct ClaimView {
  std::optional<ClaimRecord> record;  // nullopt: the file does not parse
  FileStamp stamp;
  ClaimStatus status = ClaimStatus::live;
  bool stale() const { return status != ClaimStatus::live; }
  // The lease this claim is judged by: its own, at most kMaxClaimLeaseSeconds (the default when
  // the file does not parse).
  double lease_seconds() const;
  // Who holds it and until when, for the line a waiting worker prints: "pid 123 on host h
  // (running), refreshed 5 s ago; taken over in at most 235 s unless refreshed".
  std::string describe() const;
};
// The claim file as it is now; nullopt when there is none.
std::optional<ClaimView> inspect_claim(const std::filesystem::path& claim);
// Removes the claim file `seen` described if it is still that file, unchanged (renamed to a
// temporary name of this process first — of two removers one wins — then checked, and put back
// when it was replaced or refreshed meanwhile). True when it was removed.
bool remove_claim_if_unchanged(const std::filesystem::path& claim, const ClaimView& seen);
// The claim beside a finished (intact) file when it is stale: its owner stopped after writing the
// file and before releasing the claim (killed), and no later worker would take it over, since
// nobody computes that file again. True when one was removed; a live owner's claim is kept.
bool remove_stale_claim_of_finished(const std::filesystem::path& file);

// The claims one worker holds in a store, with the heartbeat that keeps them live. Each set has
// its own tokens: two sets in one process are two claimants.
class ClaimSet {
 public:
  explicit ClaimSet(double lease_seconds = kDefaultClaimLeaseSeconds);
  ~ClaimSet();  // stops the heartbeat and releases every claim still held
  ClaimSet(const ClaimSet&) = delete;
  ClaimSet& operator=(const ClaimSet&) = delete;

  enum class Result {
    acquired,       // no claim existed (or this set held it already): this set holds it now
    taken_over,     // a stale claim was replaced by this set's
    held_by_other,  // a live claim of another worker; each call watches it (unchanged for a lease: stale)
  };
  Result try_claim(const std::filesystem::path& file);
  // Removes the claim on file if it is still this set's (a claim taken over is left to its taker).
  void release(const std::filesystem::path& file);

  double lease_seconds() const { return lease_; }
  // How long a worker waiting on others' claims sleeps between looks.
  double poll_seconds() const;
  // Claims this set held that another worker took over (it judged them stale).
  size_t lost() const;

 private:
  struct Watch {
    FileStamp stamp;
    std::string token;
    std::chrono::steady_clock::time_point since;
  };
  double lease_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::map<std::filesystem::path, std::string> held_;  // claim file -> this set's token
  std::map<std::filesystem::path, Watch> watched_;     // others' live claims, as last seen
  size_t lost_ = 0;
  std::thread heartbeat_;

  bool create(const std::filesystem::path& claim);
  bool watched_for_a_lease(const std::filesystem::path& claim, const ClaimView& seen);
  void beat();
};

}  // namespace ragkv
