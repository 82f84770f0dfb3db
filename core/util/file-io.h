// Whole files in and out: the one reader that names the file in its errors, and the one atomic
// writer (DESIGN.md §7 "Writes are atomic") every file ragkv writes goes through.
#pragma once
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ragkv {

// Whole file into memory; Error naming the file when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Files inside a store (or any directory several users or processes share) are opened only as
// regular files: the last component is never followed when it is a symbolic link (O_NOFOLLOW, so
// nothing planted in the store redirects a read or write outside it) and a FIFO, socket or device
// never blocks the open (O_NONBLOCK) and is refused. Returns the descriptor (O_CLOEXEC, blocking
// again), or -1 with *why saying what is wrong ("a FIFO, not a regular file", "a symbolic link,
// not a regular file", or strerror); errno is kept from the failing call where there was one.
int open_regular_file(const std::filesystem::path& path, int flags, std::string* why, unsigned mode = 0644);
// read_file through open_regular_file: Error "PATH: a FIFO, not a regular file" and the like.
std::string read_regular_file(const std::filesystem::path& path);

// Writes all of content to fd (a write interrupted by a signal is retried); false with errno set
// on a failure.
bool write_all(int fd, std::string_view content);

// Writes the concatenation of parts to path atomically: a temporary file beside it, named
// "<path>.ragkv-tmp.<host>.<pid>.<hex>" (host: 8 hex digits of the host name) and unique to this call (no two threads or processes ever share one),
// is written, fsynced and renamed over path, then the directory is fsynced. Readers see the old
// file or the whole new one, never a part; of two concurrent writers of one path the last rename
// wins. Error naming the file on any failure (the temporary is removed).
void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> parts);
inline void write_file_atomic(const std::filesystem::path& path, std::initializer_list<std::string_view> parts) {
  write_file_atomic(path, std::span<const std::string_view>(parts.begin(), parts.size()));
}

// Creates path holding content unless path exists (false then), so that a reader sees no file or
// the whole one: content is written to a temporary named as write_file_atomic's, which link(2)
// then names path — link fails when path exists, on local and NFS file systems alike (the classic
// NFS-safe lock file) — and the temporary's name is removed. On a file system without hard links,
// O_EXCL create then write (a reader may then see the file empty for the moment of the write).
// Error naming the file on any other failure.
bool create_file_exclusive(const std::filesystem::path& path, std::string_view content);

// The name write_file_atomic gives a temporary of target written by process pid on this machine
// (counter: any value); for tests and the sweeps that must recognise them.
std::filesystem::path temporary_path(const std::filesystem::path& target, long pid, uint64_t counter);

// Who wrote a temporary of write_file_atomic, read from its name; nullopt for any other name
// (a sweep removes only what it can prove is its own).
struct TemporaryOwner {
  std::string target;      // the file name it was to become
  bool this_host = false;  // written on this machine (its pid can be checked here)
  long pid = 0;
};
std::optional<TemporaryOwner> temporary_owner(const std::filesystem::path& path);

// True for a temporary of write_file_atomic (its exact name pattern) written on this machine by a
// process that no longer runs (killed mid-write): safe to remove. A live writer's temporary, one
// from another machine sharing the file system, and any file not named by write_file_atomic are
// never stale.
bool is_stale_temporary(const std::filesystem::path& path);

}  // namespace ragkv
