// VerifiedRecord: STORE/verified.log, read once, appended one whole line per write.
#include "core/kv/verified-record.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>
#include <charconv>
#include <string_view>

#include <fmt/format.h>

#include "core/util/file-io.h"

namespace ragkv {

namespace fs = std::filesystem;

namespace {

std::string line_of(const std::string& name, const FileStamp& s, int64_t recorded_ns) {
  return fmt::format("{} {} {} {} {}\n", name, s.size, s.mtime_ns, s.inode, recorded_ns);
}

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::optional<FileStamp> file_stamp(const fs::path& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;  // (a link is not followed)
  return FileStamp{uint64_t(st.st_size), int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                   uint64_t(st.st_ino)};
}

void VerifiedRecord::load() const {
  if (loaded_) return;
  loaded_ = true;
  std::string text;
  try {
    text = read_regular_file(log_);
  } catch (const std::exception&) {
    return;  // no log yet (or unreadable): everything is verified again
  }
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) break;  // a torn last line (a writer killed mid-append) is ignored
    const std::string_view line(text.data() + start, end - start);
    start = end + 1;
    std::string_view f[5];
    size_t n = 0, p = 0;
    for (; n < 5 && p <= line.size(); ++n) {
      const size_t q = std::min(line.find(' ', p), line.size());
      f[n] = line.substr(p, q - p);
      p = q + 1;
    }
    Entry e;
    if (n != 5 || p <= line.size() || f[0].empty() || !parse_number(f[1], e.stamp.size) ||
        !parse_number(f[2], e.stamp.mtime_ns) || !parse_number(f[3], e.stamp.inode) || !parse_number(f[4], e.recorded_ns))
      continue;  // not a line this code wrote: ignored
    entries_.emplace(std::string(f[0]), e);
  }
}

bool VerifiedRecord::verified(const fs::path& file, const FileStamp& stamp) const {
  std::lock_guard lock(mu_);
  load();
  const auto [b, e] = entries_.equal_range(file.filename().string());
  for (auto it = b; it != e; ++it)
    if (it->second.stamp == stamp && it->second.recorded_ns - stamp.mtime_ns >= kRacySeconds * 1000000000) return true;
  return false;
}

void VerifiedRecord::add(const fs::path& file, const FileStamp& stamp) const {
  const std::string name = file.filename().string();
  const int64_t now = now_ns();
  const std::string line = line_of(name, stamp, now);
  std::lock_guard lock(mu_);
  load();
  entries_.emplace(name, Entry{stamp, now});
  std::string why;
  const int fd = open_regular_file(log_, O_WRONLY | O_CREAT | O_APPEND, &why);
  if (fd < 0) {  // the record only saves verifying again: the work goes on, with one warning
    if (!warned_)
      std::fprintf(stderr, "ragkv: warning: %s: not recorded (%s); files are verified again on each use\n",
                   log_.c_str(), why.c_str());
    warned_ = true;
    return;
  }
  ssize_t w;
  do w = ::write(fd, line.data(), line.size());
  while (w < 0 && errno == EINTR);
  ::close(fd);
}

void VerifiedRecord::rewrite(const std::vector<std::pair<std::string, FileStamp>>& entries) const {
  const int64_t now = now_ns();
  std::string text;
  for (const auto& [name, s] : entries) text += line_of(name, s, now);
  std::lock_guard lock(mu_);
  write_file_atomic(log_, {text});
  entries_.clear();
  for (const auto& [name, s] : entries) entries_.emplace(name, Entry{s, now});
  loaded_ = true;
}

}  // namespace ragkv
