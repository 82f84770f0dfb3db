// STORE/verified.log: which chunk-KV files have passed every checksum, so that precompute's
// "is this cache intact?" reads a file's layers once, not on every run (verifying cheaply).
// One line per verification, "<file name> <size> <mtime ns> <inode> <recorded ns>\n",
// appended with O_APPEND in one write(2) each, so processes sharing the store interleave whole
// lines. A file counts as verified while its size, mtime and inode equal one of its lines: a
// rewritten file (a new one renamed into place) differs in inode and mtime and is verified again.
// As git does with its index ("racily clean" entries), a line recorded less than kRacySeconds
// after the file's mtime does not count: file systems keep mtime in coarse ticks, so a change in
// the same tick as the recording would keep the stamp; such a file is verified again (and then
// recorded for good). Corruption
// that keeps all three (bit rot on the disk) is not seen here: `ragkv store verify` reads every
// byte, and answer verifies each layer it loads. `store verify` rewrites the log with the intact
// files only (it never grows without bound).
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ragkv {

// What identifies one version of a file on disk.
inline constexpr int64_t kRacySeconds = 2;

struct FileStamp {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t inode = 0;
  bool operator==(const FileStamp&) const = default;
};
std::optional<FileStamp> file_stamp(const std::filesystem::path& path);  // nullopt when it cannot be stat'ed

class VerifiedRecord {
 public:
  explicit VerifiedRecord(std::filesystem::path log_path) : log_(std::move(log_path)) {}

  // Was file, as it is now (stamp), verified?
  bool verified(const std::filesystem::path& file, const FileStamp& stamp) const;
  // Records that file, at stamp, passed every checksum (best effort: a store on a read-only
  // file system just verifies again next time).
  void add(const std::filesystem::path& file, const FileStamp& stamp) const;
  // Replaces the log by these entries, recorded now (atomically).
  void rewrite(const std::vector<std::pair<std::string, FileStamp>>& entries) const;

 private:
  std::filesystem::path log_;
  mutable std::mutex mu_;
  mutable bool loaded_ = false;
  mutable bool warned_ = false;  // the one warning when the log cannot be appended to
  struct Entry {
    FileStamp stamp;
    int64_t recorded_ns = 0;
  };
  mutable std::multimap<std::string, Entry> entries_;  // file name -> verified stamps
  void load() const;                                       // under mu_
};

}  // namespace ragkv
