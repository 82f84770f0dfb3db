// GGUF v3 reader over a read-only memory map. Knows the file format only, nothing about LLMs:
// metadata key/values, tensor infos and the tensor data section, every offset bounds-checked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/mapped-file.h"
#include "core/format/quant.h"

namespace ragkv {

enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars are decoded; arrays keep their element type, count and the file
// offset of their first element (strings in an array are decoded on request).
struct GgufValue {
  GgufType type{};
  GgufType elem_type{};   // arrays only
  uint64_t count = 0;     // arrays only
  size_t data_offset = 0; // arrays: offset of element 0 in the file
  double num = 0;         // numeric scalars and bool
  int64_t inum = 0;       // integer scalars, exact
  std::string str;        // string scalars
};

struct GgufTensor {
  std::string name;
  GgmlType type{};
  std::vector<int64_t> ne;  // ne[0] is the contiguous (row) length, as in ggml
  size_t offset = 0;        // relative to the data section
  size_t nbytes = 0;
  const uint8_t* data = nullptr;
  bool file_mapped = false;  // data lies in GgufFile's read-only mapping of the file (its pages may be released)

  int64_t n_elements() const;
  int64_t rows() const { return ne.empty() ? 0 : n_elements() / ne[0]; }
  std::string shape_str() const;  // e.g. "[576, 1536]"
};

class GgufFile {
 public:
  explicit GgufFile(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  size_t file_size() const { return size_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  bool has(const std::string& key) const { return kv_.count(key) != 0; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: throw naming the key (and the file) when missing or of the wrong type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;
  std::optional<bool> find_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<float> get_float_array(const std::string& key) const;
  std::vector<int32_t> get_int_array(const std::string& key) const;

  // Bytes [0, start of the tensor data): magic, metadata and tensor infos (for fingerprints).
  // Bytes [pos, pos + n) of tensor t read from the file, not through the mapping (MappedFile::read_at).
  void read_tensor_bytes(const GgufTensor& t, size_t pos, uint8_t* dst, size_t n) const {
    file_.read_at(data_start_ + t.offset + pos, dst, n);
  }
  std::string_view header_bytes() const {
    return std::string_view(reinterpret_cast<const char*>(base_), data_start_);
  }

  const GgufTensor* find_tensor(const std::string& name) const;
  const GgufTensor& tensor(const std::string& name) const;  // throws naming the tensor

 private:
  std::string path_;
  MappedFile file_;
  const uint8_t* base_ = nullptr;  // file_.data()
  size_t size_ = 0;                // file_.size()
  uint32_t version_ = 0;
  size_t data_start_ = 0;          // file offset of the tensor data section
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;

  void parse();
};

}  // namespace ragkv
