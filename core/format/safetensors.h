// safetensors reader over a read-only memory map (the Hugging Face weight format): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, __metadata__},
// then the tensor bytes. Knows the file format only, like gguf.h: every tensor's byte range is
// checked against its shape and the file before anything uses it, and every error names the file
// (and the tensor).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/gguf.h"
#include "core/format/mapped-file.h"

namespace ragkv {

// Element types of the format. Every one is parsed (so files with int buffers such as BERT's
// position_ids load); weights can be made only from f32, f16 and bf16.
enum class SafetensorsDType : uint8_t { BOOL, U8, I8, U16, I16, F16, BF16, U32, I32, F32, U64, I64, F64 };
const char* safetensors_dtype_name(SafetensorsDType t);
size_t safetensors_dtype_size(SafetensorsDType t);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype{};
  std::vector<int64_t> shape;   // outermost first, as in PyTorch ([rows, cols] for a matrix)
  const uint8_t* data = nullptr;  // into the map; not aligned beyond 1 byte in general
  size_t nbytes = 0;

  int64_t n_elements() const;
  std::string shape_str() const;  // e.g. "[30522, 384]"
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }
  // The JSON header exactly as stored (names, dtypes, shapes and offsets of every tensor).
  std::string_view header() const { return header_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }

  const SafetensorsTensor* find(const std::string& name) const;
  // Throws naming the file and the tensor when it is missing.
  const SafetensorsTensor& tensor(const std::string& name) const;
  // Tensor `name` as a GgufTensor view for Backend::load_weight (type F32/F16/BF16, ne reversed:
  // ne[0] is the contiguous length, so a [rows, cols] matrix has ne = {cols, rows}). The shape
  // must equal `shape` (outermost first); throws naming the file, tensor, expected and actual
  // shape, or a dtype no weight can have.
  GgufTensor weight_view(const std::string& name, const std::vector<int64_t>& shape) const;

 private:
  std::string path_;
  MappedFile file_;
  const uint8_t* base_ = nullptr;  // file_.data()
  size_t size_ = 0;                // file_.size()
  std::string_view header_;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;

  void parse();
};

}  // namespace ragkv
