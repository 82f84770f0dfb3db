// StoreLock: open (creating) STORE/variants.lock and flock it.
#include "core/kv/store-lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/util/error.h"
#include "core/util/file-io.h"

namespace ragkv {

StoreLock::StoreLock(const std::filesystem::path& store_dir) {
  const std::filesystem::path p = store_dir / "variants.lock";
  std::string why;
  fd_ = open_regular_file(p, O_RDWR | O_CREAT, &why);
  if (fd_ < 0) fail("{}: cannot open the lock file: {}", p.string(), why);
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int e = errno;
    ::close(fd_);
    fail("{}: cannot lock: {}", p.string(), std::strerror(e));
  }
}

StoreLock::~StoreLock() {
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace ragkv
