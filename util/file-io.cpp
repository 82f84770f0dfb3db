// read_file and the atomic writer: temporary + fsync + rename + directory fsync.
#include "util/file-io.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "util/error.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

constexpr std::string_view kTempTag = ".tmp.";

// "<path>.tmp.<pid>.<hex>": the counter starts at a random value so that a process reusing a
// dead one's pid does not reuse its names either.
fs::path temporary_name(const fs::path& path) {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return path.string() + fmt::format("{}{}.{:x}", kTempTag, ::getpid(), counter++);
}

}  // namespace

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open for reading: {}", path.string(), errno_text());
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail("{}: read error", path.string());
  return s;
}

void write_file_atomic(const fs::path& path, std::span<const std::string_view> parts) {
  const fs::path tmp = temporary_name(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp.string(), errno_text());
  auto give_up = [&](const char* what, bool close_fd) {
    const std::string err = errno_text();
    if (close_fd) ::close(fd);
    ::unlink(tmp.c_str());
    fail("{}: {} failed: {}", path.string(), what, err);
  };
  for (std::string_view part : parts) {
    for (size_t done = 0; done < part.size();) {
      const ssize_t w = ::write(fd, part.data() + done, part.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) give_up("write", true);
      done += size_t(w);
    }
  }
  if (::fsync(fd) != 0) give_up("fsync", true);
  if (::close(fd) != 0) give_up("close", false);
  if (::rename(tmp.c_str(), path.c_str()) != 0) give_up("rename", false);
  // Make the rename itself durable (best effort: some filesystems refuse fsync on directories).
  const fs::path dir = path.has_parent_path() ? path.parent_path() : fs::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

bool is_stale_temporary(const fs::path& path) {
  const std::string name = path.filename().string();
  const size_t t = name.rfind(kTempTag);
  if (t == std::string::npos) return false;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + t + kTempTag.size(), &end, 10);
  if (pid <= 0 || !end || *end != '.') return false;
  return ::kill(pid_t(pid), 0) != 0 && errno == ESRCH;
}

}  // namespace ragkv
