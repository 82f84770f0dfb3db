// safetensors parser: maps the file, parses the JSON header and checks that every tensor's
// data_offsets lie inside the data section and match its dtype and shape.
#include "core/format/safetensors.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/util/error.h"

namespace ragkv {

namespace {

// The format caps the header at 100 MB (safetensors' own reader refuses larger ones).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeInfo {
  SafetensorsDType dtype;
  const char* name;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {SafetensorsDType::BOOL, "BOOL", 1}, {SafetensorsDType::U8, "U8", 1},
    {SafetensorsDType::I8, "I8", 1},     {SafetensorsDType::U16, "U16", 2},
    {SafetensorsDType::I16, "I16", 2},   {SafetensorsDType::F16, "F16", 2},
    {SafetensorsDType::BF16, "BF16", 2}, {SafetensorsDType::U32, "U32", 4},
    {SafetensorsDType::I32, "I32", 4},   {SafetensorsDType::F32, "F32", 4},
    {SafetensorsDType::U64, "U64", 8},   {SafetensorsDType::I64, "I64", 8},
    {SafetensorsDType::F64, "F64", 8},
};

const DTypeInfo& info(SafetensorsDType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d;
  fail("internal: unknown safetensors dtype {}", static_cast<int>(t));
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

const char* safetensors_dtype_name(SafetensorsDType t) { return info(t).name; }
size_t safetensors_dtype_size(SafetensorsDType t) { return info(t).size; }

int64_t SafetensorsTensor::n_elements() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::string SafetensorsTensor::shape_str() const { return shape_string(shape); }

SafetensorsFile::SafetensorsFile(const std::string& path)
    : path_(path), file_(path, "safetensors file"), base_(file_.data()), size_(file_.size()) {
  if (size_ < 8) fail("{}: not a safetensors file (only {} bytes, no header length)", path, size_);
  parse();
}

SafetensorsFile::~SafetensorsFile() = default;

void SafetensorsFile::parse() {
  uint64_t n_header = 0;
  std::memcpy(&n_header, base_, 8);
  if (n_header > kMaxHeaderBytes || n_header > size_ - 8)
    fail("{}: truncated or not a safetensors file: header length {} does not fit in the file ({} bytes)",
         path_, n_header, size_);
  header_ = std::string_view(reinterpret_cast<const char*>(base_ + 8), n_header);
  const uint8_t* data = base_ + 8 + n_header;
  const size_t data_bytes = size_ - 8 - n_header;

  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header_);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: bad safetensors header (not JSON): {}", path_, e.what());
  }
  if (!h.is_object()) fail("{}: bad safetensors header: expected a JSON object", path_);

  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) fail("{}: bad safetensors header: __metadata__ is not an object", path_);
      for (const auto& [k, s] : v.items()) {
        if (!s.is_string()) fail("{}: bad safetensors header: __metadata__ '{}' is not a string", path_, k);
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      fail("{}: bad safetensors header: tensor '{}' lacks dtype, shape or data_offsets", path_, name);
    SafetensorsTensor t;
    t.name = name;

    const auto& dt = v["dtype"];
    if (!dt.is_string()) fail("{}: tensor '{}': dtype is not a string", path_, name);
    const std::string dts = dt.get<std::string>();
    const DTypeInfo* di = nullptr;
    for (const auto& d : kDTypes)
      if (dts == d.name) di = &d;
    if (!di) fail("{}: tensor '{}' has dtype '{}', which ragkv does not know", path_, name, dts);
    t.dtype = di->dtype;

    const auto& shape = v["shape"];
    if (!shape.is_array()) fail("{}: tensor '{}': shape is not an array", path_, name);
    uint64_t n = 1;
    for (const auto& d : shape) {
      if (!d.is_number_unsigned())
        fail("{}: tensor '{}': shape {} holds a non-dimension", path_, name, shape.dump());
      const uint64_t dim = d.get<uint64_t>();
      // Every element is at least one byte, so a valid count never exceeds the file size.
      if (dim != 0 && n > size_ / dim)
        fail("{}: tensor '{}': shape {} is larger than the file", path_, name, shape.dump());
      n *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }

    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor '{}': data_offsets {} is not a pair of offsets", path_, name, off.dump());
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end || end > data_bytes)
      fail("{}: truncated or corrupt safetensors file: tensor '{}' data [{}, {}) is not within the "
           "{} data bytes of the file",
           path_, name, begin, end, data_bytes);
    if (end - begin != n * di->size)
      fail("{}: tensor '{}': data_offsets [{}, {}) hold {} bytes, but {} {} needs {}", path_, name, begin,
           end, end - begin, dts, t.shape_str(), n * di->size);
    t.data = data + begin;
    t.nbytes = static_cast<size_t>(end - begin);
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (!t) fail("{}: tensor '{}' not found", path_, name);
  return *t;
}

GgufTensor SafetensorsFile::weight_view(const std::string& name, const std::vector<int64_t>& shape) const {
  const SafetensorsTensor& t = tensor(name);
  if (t.shape != shape)
    fail("{}: expected {} for tensor '{}', got {}", path_, shape_string(shape), name, t.shape_str());
  GgufTensor g;
  g.name = name;
  switch (t.dtype) {
    case SafetensorsDType::F32: g.type = GgmlType::F32; break;
    case SafetensorsDType::F16: g.type = GgmlType::F16; break;
    case SafetensorsDType::BF16: g.type = GgmlType::BF16; break;
    default:
      fail("{}: tensor '{}' has dtype {}; a weight must be F32, F16 or BF16", path_, name,
           safetensors_dtype_name(t.dtype));
  }
  if (t.shape.empty()) fail("{}: tensor '{}' is a scalar; a weight needs at least one dimension", path_, name);
  g.ne.assign(t.shape.rbegin(), t.shape.rend());
  g.nbytes = t.nbytes;
  g.data = t.data;
  return g;
}

}  // namespace ragkv
