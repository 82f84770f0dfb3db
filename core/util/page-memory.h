// Memory by whole pages: an anonymous mapping for large read-mostly buffers (weights kept in a
// kernel's own layout), with transparent huge pages asked for, and the release of a read-only file
// mapping's pages once their bytes live elsewhere.
#pragma once
#include <cstddef>
#include <cstdint>

namespace ragkv {

// An anonymous private mapping of at least `bytes` bytes, zero-filled, 64-aligned (page-aligned);
// madvise(MADV_HUGEPAGE) where it spans a huge page, so the kernel may back it with 2 MiB pages
// (fewer TLB misses when it is streamed). Throws with the size when the system refuses it.
class PageMemory {
 public:
  PageMemory() = default;
  explicit PageMemory(size_t bytes);
  PageMemory(PageMemory&& o) noexcept;
  PageMemory& operator=(PageMemory&& o) noexcept;
  PageMemory(const PageMemory&) = delete;
  PageMemory& operator=(const PageMemory&) = delete;
  ~PageMemory();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Drops this process's pages of [p, p + bytes) that lie wholly inside the range, from a read-only
// mapping of a file (MADV_DONTNEED: a later read faults them in again from the file, so nothing
// is lost). Lowers the resident size once a weight's bytes have been copied into another layout.
void release_file_pages(const void* p, size_t bytes);

}  // namespace ragkv
