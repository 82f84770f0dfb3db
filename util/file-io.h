// Whole files in and out: the one reader that names the file in its errors, and the one atomic
// writer (DESIGN.md §7 "Writes are atomic") every file ragkv writes goes through.
#pragma once
#include <filesystem>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace ragkv {

// Whole file into memory; Error naming the file when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Writes the concatenation of parts to path atomically: a temporary file beside it, named
// "<path>.tmp.<pid>.<hex>" and unique to this call (no two threads or processes ever share one),
// is written, fsynced and renamed over path, then the directory is fsynced. Readers see the old
// file or the whole new one, never a part; of two concurrent writers of one path the last rename
// wins. Error naming the file on any failure (the temporary is removed).
void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> parts);
inline void write_file_atomic(const std::filesystem::path& path, std::initializer_list<std::string_view> parts) {
  write_file_atomic(path, std::span<const std::string_view>(parts.begin(), parts.size()));
}

// True for a temporary of write_file_atomic whose writer process no longer runs (it was killed
// mid-write): safe to remove. A live writer's temporary (another process) is not stale.
bool is_stale_temporary(const std::filesystem::path& path);

}  // namespace ragkv
