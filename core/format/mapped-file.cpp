// MappedFile: open, stat and mmap with errors that name the file; unmapped and closed on
// destruction (also when the constructor throws half way).
#include "core/format/mapped-file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/util/error.h"

namespace ragkv {

MappedFile::MappedFile(const std::string& path, const char* what) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail("{}: cannot open {}: {}", path, what, std::strerror(errno));
  struct stat st {};
  if (fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail("{}: cannot stat: {}", path, std::strerror(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // mmap of 0 bytes fails; callers report the empty file themselves
  void* p = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd_);
    fail("{}: cannot mmap: {}", path, std::strerror(err));
  }
  data_ = static_cast<const uint8_t*>(p);
}

void MappedFile::read_at(size_t offset, uint8_t* dst, size_t n) const {
  while (n > 0) {
    const ssize_t got = ::pread(fd_, dst, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      fail("{}: cannot read {} bytes at offset {}: {}", path_, n, offset,
           got < 0 ? std::strerror(errno) : "the file ends first");
    dst += got, offset += size_t(got), n -= size_t(got);
  }
}

MappedFile::~MappedFile() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace ragkv
