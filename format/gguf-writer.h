// GGUF v3 writer: metadata and tensors to a new file, written to a temporary name and renamed
// into place. Used to make test models (random weights of given shapes) and test fixtures.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "format/quant.h"

namespace ragkv {

class GgufWriter {
 public:
  using StringArray = std::vector<std::string>;
  using FloatArray = std::vector<float>;
  using IntArray = std::vector<int32_t>;

  void set(const std::string& key, const std::string& v);
  void set(const std::string& key, const char* v) { set(key, std::string(v)); }
  void set_u32(const std::string& key, uint32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set(const std::string& key, const StringArray& v);
  void set(const std::string& key, const FloatArray& v);
  void set(const std::string& key, const IntArray& v);
  // ne[0] is the row length; data holds ggml_row_bytes(type, ne[0]) * rows bytes.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data);
  void add_tensor_f32(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& values);

  void write(const std::string& path) const;

 private:
  struct Entry {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> payload;  // encoded value (after the type field)
  };
  struct TensorEntry {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<Entry> kv_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace ragkv
