// read_file and the atomic writer: temporary + fsync + rename + directory fsync.
#include "core/util/file-io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>

#include "core/util/error.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

constexpr std::string_view kTempTag = ".ragkv-tmp.";

// 8 hex digits of this machine's host name: a pid means something only on the machine that
// issued it (a store may sit on a file system shared by several).
const std::string& host_tag() {
  static const std::string tag = [] {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    uint32_t h = 2166136261u;  // FNV-1a
    for (const char* c = host; *c; ++c) h = (h ^ uint8_t(*c)) * 16777619u;
    return fmt::format("{:08x}", h);
  }();
  return tag;
}

// "<path>.ragkv-tmp.<host>.<pid>.<hex>": the counter starts at a random value so that a process
// reusing a dead one's pid does not reuse its names either.
fs::path temporary_name(const fs::path& path) {
  static std::atomic<uint64_t> counter{std::random_device{}()};
  return temporary_path(path, ::getpid(), counter++);
}

bool all_of_class(std::string_view s, bool (*ok)(char)) {
  if (s.empty()) return false;
  for (char c : s)
    if (!ok(c)) return false;
  return true;
}
bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

fs::path temporary_path(const fs::path& target, long pid, uint64_t counter) {
  return target.string() + fmt::format("{}{}.{}.{:x}", kTempTag, host_tag(), pid, counter);
}

std::string read_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail("{}: is a directory, expected a file", path.string());
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open for reading: {}", path.string(), errno_text());
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) fail("{}: read error: {}", path.string(), errno_text());
  return s;
}

namespace {

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISLNK(m)) return "a symbolic link";
  return "an unknown kind of file";
}

}  // namespace

int open_regular_file(const fs::path& path, int flags, std::string* why, unsigned mode) {
  const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode_t(mode));
  if (fd < 0) {
    const int e = errno;
    struct stat st {};
    // ELOOP: the last component is a symbolic link; ENXIO: a socket (or a FIFO opened for writing
    // with no reader); EISDIR: a directory opened for writing.
    if ((e == ELOOP || e == ENXIO || e == EISDIR) && ::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      *why = fmt::format("{}, not a regular file", file_kind(st.st_mode));
    else
      *why = std::strerror(e);
    errno = e;
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const int e = errno;
    *why = fmt::format("{}, not a regular file", file_kind(st.st_mode));
    ::close(fd);
    errno = e;
    return -1;
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const fs::path& path) {
  std::string why;
  const int fd = open_regular_file(path, O_RDONLY, &why);
  if (fd < 0) fail("{}: cannot open for reading: {}", path.string(), why);
  std::string s;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = errno_text();
      ::close(fd);
      fail("{}: read error: {}", path.string(), err);
    }
    if (n == 0) break;
    s.append(buf, size_t(n));
  }
  ::close(fd);
  return s;
}

bool write_all(int fd, std::string_view content) {
  for (size_t done = 0; done < content.size();) {
    const ssize_t w = ::write(fd, content.data() + done, content.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return false;
    done += size_t(w);
  }
  return true;
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
  for (std::string_view part : parts)
    if (!write_all(fd, part)) give_up("write", true);
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

namespace {

bool no_hard_links(int e) { return e == EPERM || e == ENOTSUP || e == EOPNOTSUPP || e == ENOSYS || e == EXDEV; }

}  // namespace

bool create_file_exclusive(const fs::path& path, std::string_view content) {
  const fs::path tmp = temporary_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp.string(), errno_text());
  if (!write_all(fd, content) || ::fsync(fd) != 0) {
    const std::string err = errno_text();
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("{}: write failed: {}", tmp.string(), err);
  }
  ::close(fd);
  if (::link(tmp.c_str(), path.c_str()) == 0) {
    ::unlink(tmp.c_str());
    return true;
  }
  const int e = errno;
  // Over NFS a link whose reply was lost is retried and answers EEXIST although it was made: the
  // temporary's link count says what happened.
  struct stat st {};
  const bool made = ::stat(tmp.c_str(), &st) == 0 && st.st_nlink == 2;
  ::unlink(tmp.c_str());
  if (made) return true;
  if (e == EEXIST) return false;
  if (!no_hard_links(e)) fail("{}: cannot create: {}", path.string(), std::strerror(e));
  fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0 && errno == EEXIST) return false;
  if (fd < 0) fail("{}: cannot create: {}", path.string(), errno_text());
  const bool ok = write_all(fd, content);
  const std::string err = ok ? std::string() : errno_text();
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    fail("{}: write failed: {}", path.string(), err);
  }
  return true;
}

std::optional<TemporaryOwner> temporary_owner(const fs::path& path) {
  // <target>.ragkv-tmp.<8 hex host>.<decimal pid>.<hex counter>, nothing else
  const std::string name = path.filename().string();
  const size_t t = name.rfind(kTempTag);
  if (t == std::string::npos || t == 0) return std::nullopt;
  const std::string_view rest = std::string_view(name).substr(t + kTempTag.size());
  const size_t d1 = rest.find('.'), d2 = rest.find('.', d1 == rest.npos ? d1 : d1 + 1);
  if (d1 != 8 || d2 == rest.npos) return std::nullopt;
  const std::string_view host = rest.substr(0, 8), pid = rest.substr(9, d2 - 9), counter = rest.substr(d2 + 1);
  if (!all_of_class(host, is_hex) || !all_of_class(pid, is_digit) || pid.size() > 9 || !all_of_class(counter, is_hex) ||
      counter.size() > 16)
    return std::nullopt;
  TemporaryOwner o;
  o.target = name.substr(0, t);
  o.this_host = host == host_tag();
  o.pid = std::stol(std::string(pid));
  return o;
}

bool is_stale_temporary(const fs::path& path) {
  const auto owner = temporary_owner(path);
  if (!owner || !owner->this_host || owner->pid <= 0) return false;
  return ::kill(pid_t(owner->pid), 0) != 0 && errno == ESRCH;
}

}  // namespace ragkv
