// LineWriter: FILE.partial written line by line, renamed to FILE at the end.
#include "core/util/line-writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

LineWriter::LineWriter(std::string path, const std::vector<std::string>& initial) : path_(std::move(path)) {
  if (path_.empty()) return;
  const std::string partial = path_ + ".partial";
  std::string text;
  for (const auto& l : initial) text += l + "\n";
  write_file_atomic(partial, {text});
  lines_ = initial.size();
  fd_ = ::open(partial.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open for writing: {}", partial, std::strerror(errno));
}

LineWriter::~LineWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  if (lines_ == 0) ::unlink((path_ + ".partial").c_str());  // nothing to resume from
}

void LineWriter::line(const std::string& s) {
  const std::string text = s + "\n";
  if (path_.empty()) {
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
      fail("stdout: write failed: {}", std::strerror(errno));
    return;
  }
  if (!write_all(fd_, text)) fail("{}.partial: write failed: {}", path_, std::strerror(errno));
  ++lines_;
}

void LineWriter::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0 && errno != EINVAL) {
    const int e = errno;
    ::close(fd);
    fail("{}.partial: fsync failed: {}", path_, std::strerror(e));
  }
  if (::close(fd) != 0) fail("{}.partial: close failed: {}", path_, std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(path_ + ".partial", path_, ec);
  if (ec) fail("{}: cannot rename {}.partial into place: {}", path_, path_, ec.message());
}

}  // namespace ragkv
