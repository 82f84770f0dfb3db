// A whole file mapped read-only into memory (RAII). The parsers of GGUF and safetensors read
// through it; an open/stat/mmap failure throws naming the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace ragkv {

class MappedFile {
 public:
  // what names the kind of file in the error ("model file", "safetensors file").
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // nullptr for an empty file
  size_t size() const { return size_; }

  // Copies bytes [offset, offset + n) by reading the file (pread on the same open file), not
  // through the mapping: they are not mapped into this process, so reading a whole large file
  // (a checksum) leaves the resident size alone. Throws naming the file on an error or short read.
  void read_at(size_t offset, uint8_t* dst, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ragkv
