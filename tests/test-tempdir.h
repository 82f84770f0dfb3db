// The one way a test gets a place on disk: a fresh private directory under the system temp dir,
// created when the TempDir is made and removed with its contents when it goes out of scope.
//
// The name is ragkv-<stem>-<pid>-<n>-XXXXXX: the process id and a per-process counter say who made
// it, and mkdtemp fills in the six random characters and creates the directory atomically (mode
// 0700), failing rather than reusing a name that exists. So two tests, two threads, two test
// processes or two checkouts testing at the same time never share a directory, and nothing a
// test needs is left to another test to have created first.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace ragkv::test {

struct TempDir {
  std::filesystem::path path;

  explicit TempDir(std::string_view stem = "test") {
    static std::atomic<unsigned> counter{0};
    std::string safe(stem);
    for (char& c : safe)
      if (c == '/' || c == ' ') c = '-';
    std::string templ = (std::filesystem::temp_directory_path() /
                         fmt::format("ragkv-{}-{}-{}-XXXXXX", safe, ::getpid(), counter.fetch_add(1)))
                            .string();
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + templ);
    path = templ;
  }
  ~TempDir() {
    if (path.empty()) return;  // moved from
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // Movable (the directory goes with it), not copyable.
  TempDir(TempDir&& o) noexcept : path(std::exchange(o.path, {})) {}
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  TempDir& operator=(TempDir&&) = delete;

  // Writes bytes to path/rel (creating directories) and returns the file's path.
  std::filesystem::path write(const std::string& rel, const std::string& bytes) const {
    const std::filesystem::path p = path / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
};

}  // namespace ragkv::test
