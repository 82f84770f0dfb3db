// GgufWriter: encodes the GGUF v3 layout (header, metadata, tensor infos, aligned data).
#include "core/format/gguf-writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/util/error.h"

namespace ragkv {

namespace {
constexpr size_t kAlignment = 32;

template <typename T>
void put(std::vector<uint8_t>& b, T v) {
  const size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}
}  // namespace

void GgufWriter::set(const std::string& key, const std::string& v) {
  Entry e{key, 8, {}};
  put_str(e.payload, v);
  kv_.push_back(std::move(e));
}
void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  Entry e{key, 4, {}};
  put(e.payload, v);
  kv_.push_back(std::move(e));
}
void GgufWriter::set_f32(const std::string& key, float v) {
  Entry e{key, 6, {}};
  put(e.payload, v);
  kv_.push_back(std::move(e));
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  Entry e{key, 7, {}};
  put<uint8_t>(e.payload, v ? 1 : 0);
  kv_.push_back(std::move(e));
}
void GgufWriter::set(const std::string& key, const StringArray& v) {
  Entry e{key, 9, {}};
  put<uint32_t>(e.payload, 8);
  put<uint64_t>(e.payload, v.size());
  for (const auto& s : v) put_str(e.payload, s);
  kv_.push_back(std::move(e));
}
void GgufWriter::set(const std::string& key, const FloatArray& v) {
  Entry e{key, 9, {}};
  put<uint32_t>(e.payload, 6);
  put<uint64_t>(e.payload, v.size());
  for (float f : v) put(e.payload, f);
  kv_.push_back(std::move(e));
}
void GgufWriter::set(const std::string& key, const IntArray& v) {
  Entry e{key, 9, {}};
  put<uint32_t>(e.payload, 5);
  put<uint64_t>(e.payload, v.size());
  for (int32_t i : v) put(e.payload, i);
  kv_.push_back(std::move(e));
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                            std::vector<uint8_t> data) {
  const uint64_t bytes = data.size();
  tensors_.push_back({name, type, std::move(ne), bytes, std::move(data), {}});
}

void GgufWriter::add_tensor_source(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                                   TensorSource source) {
  if (ne.empty()) fail("tensor '{}': no dimensions", name);
  uint64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= uint64_t(ne[i]);
  const uint64_t bytes = ggml_row_bytes(type, ne[0]) * rows;
  tensors_.push_back({name, type, std::move(ne), bytes, {}, std::move(source)});
}

void GgufWriter::add_tensor_f32(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& values) {
  std::vector<uint8_t> data(values.size() * 4);
  std::memcpy(data.data(), values.data(), data.size());
  add_tensor(name, GgmlType::F32, std::move(ne), std::move(data));
}

void GgufWriter::write(const std::string& path) const {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 0x46554747);
  put<uint32_t>(b, 3);
  put<uint64_t>(b, tensors_.size());
  put<uint64_t>(b, kv_.size());
  for (const auto& e : kv_) {
    put_str(b, e.key);
    put<uint32_t>(b, e.type);
    b.insert(b.end(), e.payload.begin(), e.payload.end());
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_str(b, t.name);
    put<uint32_t>(b, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<int64_t>(b, d);
    put<uint32_t>(b, static_cast<uint32_t>(t.type));
    put<uint64_t>(b, offset);
    offset += (t.bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  b.resize((b.size() + kAlignment - 1) / kAlignment * kAlignment, 0);

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  auto write_padded = [&](const uint8_t* data, size_t n) {
    static const uint8_t zeros[kAlignment] = {};
    const size_t pad = (kAlignment - n % kAlignment) % kAlignment;
    if (std::fwrite(data, 1, n, f) != n || std::fwrite(zeros, 1, pad, f) != pad)
      fail("{}: write failed: {}", tmp, std::strerror(errno));
  };
  try {
    write_padded(b.data(), b.size());
    for (const auto& t : tensors_) {
      if (!t.source) {
        write_padded(t.data.data(), t.data.size());
        continue;
      }
      const std::vector<uint8_t> data = t.source();
      if (data.size() != t.bytes)
        fail("tensor '{}': its source made {} bytes, expected {}", t.name, data.size(), t.bytes);
      write_padded(data.data(), data.size());
    }
  } catch (...) {
    std::fclose(f);
    std::remove(tmp.c_str());
    throw;
  }
  if (std::fclose(f) != 0) {
    std::remove(tmp.c_str());
    fail("{}: write failed", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace ragkv
