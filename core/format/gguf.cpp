// GGUF v3 parser: reads the header, metadata and tensor infos of a memory-mapped file and
// checks that every string, array and tensor lies inside the file before anything uses it.
#include "core/format/gguf.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/util/error.h"

namespace ragkv {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxDims = 4;

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::u8: case GgufType::i8: case GgufType::boolean: return 1;
    case GgufType::u16: case GgufType::i16: return 2;
    case GgufType::u32: case GgufType::i32: case GgufType::f32: return 4;
    case GgufType::u64: case GgufType::i64: case GgufType::f64: return 8;
    default: return 0;
  }
}

// Sequential reader with bounds checks; every failure names the file and the offset.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* base, size_t size)
      : path_(path), base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  void need(size_t n, const char* what) const {
    if (n > size_ || pos_ > size_ - n)
      fail("{}: truncated or corrupt GGUF: {} at offset {} runs past the end of the file ({} bytes)",
           path_, what, pos_, size_);
  }
  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), n);
    pos_ += n;
    return s;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const std::string& path_;
  const uint8_t* base_;
  size_t size_;
  size_t pos_ = 0;
};

double scalar_as_double(Cursor& c, GgufType t, int64_t* as_int) {
  switch (t) {
    case GgufType::u8: { auto v = c.read<uint8_t>("value"); *as_int = v; return v; }
    case GgufType::i8: { auto v = c.read<int8_t>("value"); *as_int = v; return v; }
    case GgufType::u16: { auto v = c.read<uint16_t>("value"); *as_int = v; return v; }
    case GgufType::i16: { auto v = c.read<int16_t>("value"); *as_int = v; return v; }
    case GgufType::u32: { auto v = c.read<uint32_t>("value"); *as_int = v; return v; }
    case GgufType::i32: { auto v = c.read<int32_t>("value"); *as_int = v; return v; }
    case GgufType::u64: { auto v = c.read<uint64_t>("value"); *as_int = (int64_t)v; return (double)v; }
    case GgufType::i64: { auto v = c.read<int64_t>("value"); *as_int = v; return (double)v; }
    case GgufType::boolean: { auto v = c.read<uint8_t>("value"); *as_int = v != 0; return v != 0; }
    // Floats have no integer value (find_int refuses them); converting one out of int64's range
    // would be undefined behaviour (found by fuzzing).
    case GgufType::f32: { auto v = c.read<float>("value"); *as_int = 0; return v; }
    case GgufType::f64: { auto v = c.read<double>("value"); *as_int = 0; return v; }
    default: return 0;
  }
}

bool is_integer(GgufType t) {
  return t == GgufType::u8 || t == GgufType::i8 || t == GgufType::u16 || t == GgufType::i16 ||
         t == GgufType::u32 || t == GgufType::i32 || t == GgufType::u64 || t == GgufType::i64;
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                "bool", "string", "array", "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(t);
  return i < 13 ? names[i] : "unknown";
}

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

std::string GgufTensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

GgufFile::GgufFile(const std::string& path)
    : path_(path), file_(path, "model file"), base_(file_.data()), size_(file_.size()) {
  if (size_ < 24) fail("{}: not a GGUF file (only {} bytes)", path, size_);
  parse();
}

GgufFile::~GgufFile() = default;

void GgufFile::parse() {
  Cursor c(path_, base_, size_);
  if (c.read<uint32_t>("magic") != kGgufMagic) fail("{}: not a GGUF file (bad magic)", path_);
  version_ = c.read<uint32_t>("version");
  if (version_ != 3 && version_ != 2)
    fail("{}: GGUF version {} is not supported (expected 3)", path_, version_);
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each entry takes at least 8 bytes, which bounds the counts by the file size.
  if (n_tensors > size_ / 8 || n_kv > size_ / 8)
    fail("{}: corrupt GGUF header: {} tensors, {} metadata entries in a {}-byte file", path_,
         n_tensors, n_kv, size_);

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key");
    GgufValue v;
    v.type = static_cast<GgufType>(c.read<uint32_t>("metadata type"));
    if (v.type == GgufType::string) {
      v.str = c.read_string("string value");
    } else if (v.type == GgufType::array) {
      v.elem_type = static_cast<GgufType>(c.read<uint32_t>("array type"));
      v.count = c.read<uint64_t>("array length");
      v.data_offset = c.pos();
      if (v.elem_type == GgufType::string) {
        for (uint64_t j = 0; j < v.count; ++j) c.skip(c.read<uint64_t>("string length"), "string");
      } else if (size_t es = scalar_size(v.elem_type); es != 0) {
        if (v.count > size_ / es) fail("{}: corrupt GGUF: array '{}' is too long", path_, key);
        c.skip(v.count * es, "array data");
      } else {
        fail("{}: metadata '{}' is an array of unsupported type {}", path_, key,
             static_cast<uint32_t>(v.elem_type));
      }
    } else if (scalar_size(v.type) != 0) {
      v.num = scalar_as_double(c, v.type, &v.inum);
    } else {
      fail("{}: metadata '{}' has unknown type {}", path_, key, static_cast<uint32_t>(v.type));
    }
    kv_[std::move(key)] = std::move(v);
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.read_string("tensor name");
    const uint32_t n_dims = c.read<uint32_t>("tensor dims");
    if (n_dims == 0 || n_dims > kMaxDims)
      fail("{}: tensor '{}' has {} dimensions (expected 1..4)", path_, t.name, n_dims);
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const int64_t n = c.read<int64_t>("tensor shape");
      if (n <= 0 || n > (int64_t(1) << 40)) fail("{}: tensor '{}' has bad dimension {}", path_, t.name, n);
      t.ne.push_back(n);
      // Every later product over the shape (n_elements, byte sizes) stays inside int64 (found by
      // fuzzing: four dimensions of 2^40 overflowed n_elements()).
      if (__builtin_mul_overflow(elements, n, &elements) || elements > (int64_t(1) << 56))
        fail("{}: tensor '{}' has a shape of more than 2^56 elements: the file is corrupt", path_, t.name);
    }
    t.type = static_cast<GgmlType>(c.read<uint32_t>("tensor type"));
    t.offset = c.read<uint64_t>("tensor offset");
    if (tensor_index_.count(t.name)) fail("{}: tensor '{}' appears twice", path_, t.name);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  uint64_t alignment = 32;
  if (auto a = find_int("general.alignment")) alignment = static_cast<uint64_t>(*a);
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    fail("{}: general.alignment {} is not a power of two", path_, alignment);
  const size_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  data_start_ = std::min(data_start, size_);

  for (GgufTensor& t : tensors_) {
    // Sizes only for types we know the geometry of; the data of an unsupported type is refused
    // later, by name, when a model asks for the tensor.
    try {
      if (t.ne[0] % ggml_block_elems(t.type) != 0)
        fail("{}: tensor '{}' row length {} is not a multiple of the {} block size {}", path_,
             t.name, t.ne[0], ggml_type_name(t.type), ggml_block_elems(t.type));
      if (__builtin_mul_overflow(ggml_row_bytes(t.type, t.ne[0]), static_cast<size_t>(t.rows()), &t.nbytes))
        fail("{}: tensor '{}' of shape {} has a byte size beyond 2^64: the file is corrupt", path_, t.name,
             t.shape_str());
    } catch (const Error&) {
      if (ggml_type_supported(t.type)) throw;
      t.nbytes = 0;
    }
    if (t.offset > size_ || data_start > size_ - t.offset || t.nbytes > size_ - data_start - t.offset)
      fail("{}: tensor '{}' data is not within the file bounds (offset {}, {} bytes, file {} bytes); "
           "the file is truncated or corrupt", path_, t.name, data_start + t.offset, t.nbytes, size_);
    if (t.offset % alignment != 0)
      fail("{}: tensor '{}' offset {} is not a multiple of general.alignment {}: the file is corrupt", path_, t.name,
           t.offset, alignment);
    t.data = base_ + data_start + t.offset;
    t.file_mapped = true;
  }
  // The GGUF data section holds each tensor once: two whose bytes overlap would be one memory read
  // as two weights (a crafted or corrupt file).
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : tensors_)
    if (t.nbytes > 0) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->nbytes > by_offset[i]->offset)
      fail("{}: tensors '{}' (offset {}, {} bytes) and '{}' (offset {}) overlap: the file is corrupt", path_,
           by_offset[i - 1]->name, by_offset[i - 1]->offset, by_offset[i - 1]->nbytes, by_offset[i]->name,
           by_offset[i]->offset);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

namespace {
[[noreturn]] void missing(const std::string& path, const std::string& key) {
  fail("{}: GGUF metadata '{}' is missing", path, key);
}
[[noreturn]] void wrong_type(const std::string& path, const std::string& key, GgufType t, const char* want) {
  fail("{}: GGUF metadata '{}' is {} (expected {})", path, key, gguf_type_name(t), want);
}
}  // namespace

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (!is_integer(v->type) && v->type != GgufType::boolean) wrong_type(path_, key, v->type, "an integer");
  return v->inum;
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::f32 && v->type != GgufType::f64 && !is_integer(v->type))
    wrong_type(path_, key, v->type, "a number");
  return v->num;
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::string) wrong_type(path_, key, v->type, "a string");
  return v->str;
}

std::optional<bool> GgufFile::find_bool(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::boolean && !is_integer(v->type)) wrong_type(path_, key, v->type, "a bool");
  return v->inum != 0;
}

int64_t GgufFile::get_int(const std::string& key) const {
  if (auto v = find_int(key)) return *v;
  missing(path_, key);
}
double GgufFile::get_float(const std::string& key) const {
  if (auto v = find_float(key)) return *v;
  missing(path_, key);
}
std::string GgufFile::get_string(const std::string& key) const {
  if (auto v = find_string(key)) return *v;
  missing(path_, key);
}
bool GgufFile::get_bool(const std::string& key) const {
  if (auto v = find_bool(key)) return *v;
  missing(path_, key);
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing(path_, key);
  if (v->type != GgufType::array || v->elem_type != GgufType::string)
    wrong_type(path_, key, v->type, "an array of strings");
  std::vector<std::string> out;
  out.reserve(v->count);
  size_t pos = v->data_offset;  // bounds were checked by parse()
  for (uint64_t i = 0; i < v->count; ++i) {
    uint64_t n;
    std::memcpy(&n, base_ + pos, 8);
    out.emplace_back(reinterpret_cast<const char*>(base_ + pos + 8), n);
    pos += 8 + n;
  }
  return out;
}

std::vector<float> GgufFile::get_float_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing(path_, key);
  if (v->type != GgufType::array || (v->elem_type != GgufType::f32 && v->elem_type != GgufType::f64))
    wrong_type(path_, key, v->type, "an array of floats");
  std::vector<float> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    if (v->elem_type == GgufType::f32) {
      std::memcpy(&out[i], base_ + v->data_offset + 4 * i, 4);
    } else {
      double d;
      std::memcpy(&d, base_ + v->data_offset + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
  }
  return out;
}

std::vector<int32_t> GgufFile::get_int_array(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) missing(path_, key);
  if (v->type != GgufType::array || !is_integer(v->elem_type))
    wrong_type(path_, key, v->type, "an array of integers");
  const size_t es = scalar_size(v->elem_type);
  std::vector<int32_t> out(v->count);
  for (uint64_t i = 0; i < v->count; ++i) {
    int64_t x = 0;
    const uint8_t* p = base_ + v->data_offset + es * i;
    switch (v->elem_type) {
      case GgufType::u8: x = *p; break;
      case GgufType::i8: x = static_cast<int8_t>(*p); break;
      case GgufType::u16: { uint16_t t; std::memcpy(&t, p, 2); x = t; break; }
      case GgufType::i16: { int16_t t; std::memcpy(&t, p, 2); x = t; break; }
      case GgufType::u32: { uint32_t t; std::memcpy(&t, p, 4); x = t; break; }
      case GgufType::i32: { int32_t t; std::memcpy(&t, p, 4); x = t; break; }
      default: { int64_t t; std::memcpy(&t, p, 8); x = t; break; }
    }
    out[i] = static_cast<int32_t>(x);
  }
  return out;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  if (const GgufTensor* t = find_tensor(name)) return *t;
  fail("{}: tensor '{}' is missing from the model file", path_, name);
}

}  // namespace ragkv
