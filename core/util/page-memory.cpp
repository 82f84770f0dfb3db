// PageMemory and release_file_pages (page-memory.h) on POSIX mmap/madvise.
#include "core/util/page-memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;

size_t page_size() {
  static const size_t size = size_t(sysconf(_SC_PAGESIZE));
  return size;
}
}  // namespace

PageMemory::PageMemory(size_t bytes) {
  if (bytes == 0) return;
  const size_t page = page_size();
  size_ = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    size_ = 0;
    fail("cannot map {} bytes of memory: {}", bytes, std::strerror(err));
  }
  data_ = static_cast<uint8_t*>(p);
#ifdef MADV_HUGEPAGE
  if (size_ >= kHugePage) madvise(data_, size_, MADV_HUGEPAGE);  // advice only: ignored where unsupported
#endif
}

PageMemory::PageMemory(PageMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}

PageMemory& PageMemory::operator=(PageMemory&& o) noexcept {
  if (this != &o) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

PageMemory::~PageMemory() {
  if (data_) munmap(data_, size_);
}

void release_file_pages(const void* p, size_t bytes) {
  const size_t page = page_size();
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advice: failure harmless
}

}  // namespace ragkv
