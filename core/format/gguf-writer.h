// GGUF v3 writer: metadata and tensors to a new file, written to a temporary name and renamed
// into place. Used to make test models (random weights of given shapes) and test fixtures.
// Tensors are written one after another: a tensor added with a source is made only when write()
// reaches it, so a model of many GB is never held in memory whole.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "core/format/quant.h"

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
  // The tensor's bytes come from source() when write() reaches it, in the order tensors were
  // added; it must return exactly ggml_row_bytes(type, ne[0]) * rows bytes (checked).
  using TensorSource = std::function<std::vector<uint8_t>()>;
  void add_tensor_source(const std::string& name, GgmlType type, std::vector<int64_t> ne, TensorSource source);

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
    uint64_t bytes;               // data's size, or what source must return
    std::vector<uint8_t> data;
    TensorSource source;          // empty when data is given
  };
  std::vector<Entry> kv_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace ragkv
