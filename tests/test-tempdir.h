// A fresh directory under the system temp dir for one test, removed at scope end.
#pragma once
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ragkv::test {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& stem) {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() / fmt::format("ragkv-{}-{}-{}", stem, ::getpid(), counter++);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // Writes bytes to path/rel (creating directories) and returns the file's path.
  std::filesystem::path write(const std::string& rel, const std::string& bytes) const {
    const std::filesystem::path p = path / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
};

}  // namespace ragkv::test
