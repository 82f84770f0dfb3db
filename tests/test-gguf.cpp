// GGUF reader: round trip through the writer, and every kind of bad file refused with a message
// that names the problem.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/util/error.h"
#include "core/format/gguf-writer.h"
#include "core/format/gguf.h"
#include "core/model/model-config.h"
#include "core/model/model.h"
#include "core/model/random-model.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"

namespace fs = std::filesystem;
using namespace ragkv;

namespace {

// name in the test's own directory.
std::string temp_path(const test::TempDir& dir, const std::string& name) { return (dir.path / name).string(); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

TEST_CASE("gguf: writer and reader round trip metadata and tensors") {
  const test::TempDir tmp("gguf");
  GgufWriter w;
  w.set("general.architecture", "llama");
  w.set_u32("llama.block_count", 7);
  w.set_f32("llama.rope.freq_base", 500000.f);
  w.set_bool("flag", true);
  w.set("names", GgufWriter::StringArray{"a", "", "ünïcode"});
  w.set("floats", GgufWriter::FloatArray{1.5f, -2.f});
  w.set("ints", GgufWriter::IntArray{3, -4, 5});
  std::vector<float> vals(3 * 5);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = float(i) * 0.5f;
  w.add_tensor_f32("m", {5, 3}, vals);
  w.add_tensor_f32("v", {7}, std::vector<float>(7, 1.f));
  const std::string path = temp_path(tmp, "roundtrip.gguf");
  w.write(path);

  GgufFile g(path);
  CHECK(g.version() == 3);
  CHECK(g.get_string("general.architecture") == "llama");
  CHECK(g.get_int("llama.block_count") == 7);
  CHECK(g.get_float("llama.rope.freq_base") == doctest::Approx(500000.0));
  CHECK(g.get_bool("flag"));
  CHECK(g.get_string_array("names") == std::vector<std::string>{"a", "", "ünïcode"});
  CHECK(g.get_float_array("floats") == std::vector<float>{1.5f, -2.f});
  CHECK(g.get_int_array("ints") == std::vector<int32_t>{3, -4, 5});
  CHECK_FALSE(g.find_int("absent").has_value());
  const GgufTensor& m = g.tensor("m");
  CHECK(m.ne == std::vector<int64_t>{5, 3});
  CHECK(m.rows() == 3);
  CHECK(m.nbytes == 60);
  const float* data = reinterpret_cast<const float*>(m.data);
  CHECK(data[14] == 7.f);
  CHECK(reinterpret_cast<uintptr_t>(m.data) % 32 == 0);
  CHECK(g.tensor("v").shape_str() == "[7]");
}

TEST_CASE("gguf: tensors from sources are made in order while writing, their sizes checked") {
  const test::TempDir tmp("gguf");
  GgufWriter w;
  std::vector<std::string> made;
  w.add_tensor_f32("a", {3}, {1.f, 2.f, 3.f});
  w.add_tensor_source("q", GgmlType::Q8_0, {64, 2}, [&] {
    made.push_back("q");
    std::vector<uint8_t> b(2 * 2 * ggml_block_bytes(GgmlType::Q8_0));
    for (size_t i = 0; i < b.size(); ++i) b[i] = uint8_t(i);
    return b;
  });
  w.add_tensor_source("f", GgmlType::F32, {5}, [&] {
    made.push_back("f");
    std::vector<float> v = {5, 4, 3, 2, 1};
    std::vector<uint8_t> b(20);
    std::memcpy(b.data(), v.data(), 20);
    return b;
  });
  CHECK(made.empty());  // nothing made before write()
  const std::string path = temp_path(tmp, "sources.gguf");
  w.write(path);
  CHECK(made == std::vector<std::string>{"q", "f"});
  GgufFile g(path);
  CHECK(reinterpret_cast<const float*>(g.tensor("a").data)[2] == 3.f);
  const GgufTensor& q = g.tensor("q");
  CHECK(q.type == GgmlType::Q8_0);
  CHECK(q.nbytes == 136);
  CHECK(q.data[135] == 135);
  CHECK(reinterpret_cast<uintptr_t>(g.tensor("f").data) % 32 == 0);
  CHECK(reinterpret_cast<const float*>(g.tensor("f").data)[0] == 5.f);

  GgufWriter bad;
  bad.add_tensor_source("short", GgmlType::F32, {8}, [] { return std::vector<uint8_t>(16); });
  const std::string bad_path = temp_path(tmp, "bad.gguf");
  CHECK(error_of([&] { bad.write(bad_path); }) == "tensor 'short': its source made 16 bytes, expected 32");
  CHECK_FALSE(fs::exists(bad_path));
  CHECK_FALSE(fs::exists(bad_path + ".tmp"));
}

TEST_CASE("gguf: wrong types and missing keys name the key") {
  const test::TempDir tmp("gguf");
  GgufWriter w;
  w.set("s", "text");
  const std::string path = temp_path(tmp, "types.gguf");
  w.write(path);
  GgufFile g(path);
  CHECK(error_of([&] { g.get_int("s"); }).find("'s' is string") != std::string::npos);
  CHECK(error_of([&] { g.get_string("nope"); }).find("'nope' is missing") != std::string::npos);
  CHECK(error_of([&] { g.tensor("w"); }).find("tensor 'w' is missing") != std::string::npos);
}

TEST_CASE("gguf: a missing, empty, foreign or truncated file is refused with a clear error") {
  const test::TempDir tmp("gguf");
  CHECK(error_of([] { GgufFile g("/nonexistent/model.gguf"); }).find("cannot open") != std::string::npos);

  const std::string empty = temp_path(tmp, "empty.gguf");
  write_bytes(empty, {});
  CHECK(error_of([&] { GgufFile g(empty); }).find("not a GGUF file") != std::string::npos);

  const std::string foreign = temp_path(tmp, "foreign.gguf");
  write_bytes(foreign, std::vector<char>(4096, 'x'));
  CHECK(error_of([&] { GgufFile g(foreign); }).find("bad magic") != std::string::npos);

  // A real model cut short: the header survives, the tensor data does not.
  const std::string model = test::smollm_path();
  REQUIRE_MESSAGE(fs::exists(model), "run `make setup` first: " << model);
  std::vector<char> head(4 << 20);
  std::ifstream(model, std::ios::binary).read(head.data(), std::streamsize(head.size()));
  const std::string cut = temp_path(tmp, "truncated.gguf");
  write_bytes(cut, head);
  const std::string msg = error_of([&] { GgufFile g(cut); });
  CHECK(msg.find("not within the file bounds") != std::string::npos);
  CHECK(msg.find("truncated") != std::string::npos);

  // Cut inside the metadata (vocabulary strings).
  head.resize(100000);
  write_bytes(cut, head);
  CHECK(error_of([&] { GgufFile g(cut); }).find("runs past the end of the file") != std::string::npos);

  // A corrupt count in the header.
  std::vector<char> bad(64, 0);
  const uint32_t magic = 0x46554747, version = 3;
  const uint64_t huge = ~uint64_t(0) >> 1;
  std::memcpy(bad.data(), &magic, 4);
  std::memcpy(bad.data() + 4, &version, 4);
  std::memcpy(bad.data() + 8, &huge, 8);
  write_bytes(cut, bad);
  CHECK(error_of([&] { GgufFile g(cut); }).find("corrupt GGUF header") != std::string::npos);
}

TEST_CASE("gguf: an unsupported architecture or tensor type is refused by name") {
  const test::TempDir tmp("gguf");
  GgufWriter w;
  w.set("general.architecture", "mamba");
  w.add_tensor("blk.0.attn_q.weight", GgmlType::IQ2_XS, {256, 1}, std::vector<uint8_t>(ggml_block_bytes(GgmlType::IQ2_XS)));
  const std::string path = temp_path(tmp, "unsupported.gguf");
  w.write(path);
  GgufFile g(path);
  CHECK(error_of([&] { ModelConfig::from_gguf(g); }).find("architecture 'mamba' is not supported") != std::string::npos);
  auto cpu = make_cpu_backend(1);
  const std::string msg = error_of([&] { cpu->load_weight(g.tensor("blk.0.attn_q.weight")); });
  CHECK(msg.find("IQ2_XS") != std::string::npos);
  CHECK(msg.find("blk.0.attn_q.weight") != std::string::npos);
}

namespace {

// Offset of the type field of tensor `name`'s info in GGUF bytes (name, u32 n_dims, i64 dims).
size_t tensor_info_type_offset(const std::string& bytes, const std::string& name, uint32_t n_dims) {
  const size_t at = bytes.find(name);
  REQUIRE(at != std::string::npos);
  return at + name.size() + 4 + 8 * n_dims;
}

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

// Fuzz regressions (fuzz/fuzz-gguf.cpp; each found by libFuzzer under UBSan, each input in
// fuzz/corpus/gguf/crash-*): the parser and the model loader on hostile GGUF files.
TEST_CASE("gguf: a float value beyond int64 opens, and is no integer (fuzz regression)") {
  // f64 1.1e219 for a key used to be converted to int64 for GgufValue::inum: undefined behaviour.
  const test::TempDir tmp("gguf");
  GgufWriter w;
  w.set_f32("big", 3e38f);
  w.set_f32("nan", NAN);
  const std::string path = temp_path(tmp, "floats.gguf");
  w.write(path);
  GgufFile g(path);
  CHECK(g.get_float("big") == doctest::Approx(3e38));
  CHECK(std::isnan(g.get_float("nan")));
  CHECK(error_of([&] { g.get_int("big"); }).find("'big' is f32 (expected an integer)") != std::string::npos);
}

TEST_CASE("gguf: a tensor shape whose element count overflows is refused (fuzz regression)") {
  // Dimensions of up to 2^40 each passed; their product overflowed int64 in n_elements().
  const test::TempDir tmp("gguf");
  GgufWriter w;
  w.add_tensor_f32("t", {4, 2}, std::vector<float>(8, 1.f));
  const std::string path = temp_path(tmp, "shape.gguf");
  w.write(path);
  std::string bytes = read_all(path);
  const size_t type_at = tensor_info_type_offset(bytes, "t", 2);
  for (const int64_t dim : {int64_t(1) << 40, (int64_t(1) << 40) - 1}) {
    std::memcpy(bytes.data() + type_at - 16, &dim, 8);
    std::memcpy(bytes.data() + type_at - 8, &dim, 8);
    write_bytes(path, std::vector<char>(bytes.begin(), bytes.end()));
    const std::string msg = error_of([&] { GgufFile g(path); });
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("tensor 't' has a shape of more than 2^56 elements") != std::string::npos);
  }
}

TEST_CASE("gguf: a weight of a type the backend cannot use is refused naming the file (fuzz regression)") {
  // The backend's message named the tensor only; the model loader now adds the file.
  const test::TempDir tmp("gguf");
  const std::string path = temp_path(tmp, "tiny.gguf");
  RandomModelSpec spec;
  spec.n_layer = 1;
  spec.n_embd = 8;
  spec.n_head = 2;
  spec.n_head_kv = 1;
  spec.n_ff = 16;
  write_random_model(spec, path);
  std::string bytes = read_all(path);
  const uint32_t iq2_xs = static_cast<uint32_t>(GgmlType::IQ2_XS);
  std::memcpy(bytes.data() + tensor_info_type_offset(bytes, "blk.0.attn_q.weight", 2), &iq2_xs, 4);
  write_bytes(path, std::vector<char>(bytes.begin(), bytes.end()));
  auto cpu = make_cpu_backend(1);
  const std::string msg = error_of([&] { Model m(path, *cpu); });
  CHECK(msg.find(path + ": tensor 'blk.0.attn_q.weight' has type IQ2_XS") != std::string::npos);
}

TEST_CASE("gguf: a tensor offset off the alignment, or two tensors sharing bytes, is refused") {
  const test::TempDir tmp("gguf");
  GgufWriter w;
  w.add_tensor_f32("ta", {8}, std::vector<float>(8, 1.f));
  w.add_tensor_f32("tb", {8}, std::vector<float>(8, 2.f));
  const std::string path = temp_path(tmp, "offsets.gguf");
  w.write(path);
  const std::string good = read_all(path);
  // tensor info: name, u32 n_dims, i64 dims, u32 type, u64 offset
  const size_t b_offset_at = tensor_info_type_offset(good, "tb", 1) + 4;
  uint64_t b_offset;
  std::memcpy(&b_offset, good.data() + b_offset_at, 8);
  REQUIRE(b_offset >= 32);
  for (const auto& [offset, expect] : {std::pair<uint64_t, std::string>{b_offset - 4, "offset " + std::to_string(b_offset - 4) +
                                                                                             " is not a multiple of general.alignment 32"},
                                       std::pair<uint64_t, std::string>{0, "tensors 'ta' (offset 0, 32 bytes) and 'tb' (offset 0) overlap"}}) {
    std::string bytes = good;
    std::memcpy(bytes.data() + b_offset_at, &offset, 8);
    write_bytes(path, std::vector<char>(bytes.begin(), bytes.end()));
    const std::string msg = error_of([&] { GgufFile g(path); });
    CAPTURE(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(expect) != std::string::npos);
  }
}
