// Sentence embedder against the reference (sentence-transformers, testdata/make_embedder_golden.py):
// WordPiece ids equal, embeddings at cosine ≥ 0.999, unit norms, batching invariance; the
// safetensors reader's errors on damaged files.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/backend/backend.h"
#include "core/backend/cpu-backend.h"
#include "core/util/error.h"
#include "core/format/safetensors.h"
#include "core/model/embedder.h"
#include "core/model/wordpiece.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"

using namespace ragkv;
namespace fs = std::filesystem;

namespace {

fs::path model_dir() { return test::source_dir() / "models" / "all-MiniLM-L6-v2"; }

const nlohmann::json& golden() {
  static const nlohmann::json g = [] {
    std::ifstream f(test::testdata("embedder_golden.json"));
    REQUIRE(f.good());
    return nlohmann::json::parse(f);
  }();
  return g;
}

// One embedder for the whole file: loading is the slow part.
Embedder& embedder() {
  static std::unique_ptr<Backend> backend = make_cpu_backend(2);
  static Embedder e;
  if (!e.loaded()) {
    INFO("model folder: " << model_dir() << " (fetched by `make setup`)");
    REQUIRE(fs::is_directory(model_dir()));
    e.load(model_dir(), *backend);
  }
  return e;
}

std::string pieces(const WordPieceTokenizer& tok, const std::vector<int32_t>& ids) {
  std::string s;
  for (const int32_t id : ids) s += (s.empty() ? "" : " ") + (id >= 0 && size_t(id) < tok.vocab_size() ? tok.token(id) : "?");
  return s;
}

double cosine(const float* a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < b.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return ab / std::sqrt(aa * bb);
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// A safetensors file: the 8-byte header length, the header, the data.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

}  // namespace

TEST_CASE("embedder: WordPiece ids equal the reference's for every golden sentence") {
  const auto tok = WordPieceTokenizer::load(model_dir());
  CHECK(tok.config().do_lower_case);
  CHECK(tok.config().max_seq_length == 256);  // sentence_bert_config.json, not model_max_length
  const auto& g = golden();
  REQUIRE(g["cases"].size() >= 20);
  int truncated = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = tok.encode(text);
    INFO("text: " << nlohmann::json(text).dump());
    INFO("want: " << pieces(tok, want));
    INFO("got:  " << pieces(tok, got));
    CHECK(got == want);
    truncated += want.size() == 256;
  }
  CHECK(truncated >= 1);  // the fixture exercises truncation
}

TEST_CASE("embedder: WordPiece on a toy vocabulary") {
  WordPieceTokenizer::Config cfg;
  cfg.max_seq_length = 6;
  cfg.max_input_chars_per_word = 9;
  WordPieceTokenizer tok({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "aff", ",", "e", "##e"}, cfg);
  using V = std::vector<int32_t>;
  CHECK(tok.tokenize("unaffable") == V{5, 6, 7});
  CHECK(tok.tokenize("UNAFFÁBLE, aff") == V{5, 6, 7, 9, 8});   // lower-cased, accent stripped
  CHECK(tok.tokenize("unaffablex") == V{1});                    // cannot be spelled: [UNK]
  CHECK(tok.tokenize("eeeeeeeeee") == V{1});                    // 10 characters > 9: [UNK]
  CHECK(tok.tokenize("eeeeeeeee") == V{10, 11, 11, 11, 11, 11, 11, 11, 11});
  CHECK(tok.tokenize("aff[MASK]un") == V{8, 4, 5});             // special tokens in raw text
  CHECK(tok.tokenize("e\xff\xfe" "e") == V{10, 11});            // invalid UTF-8 is dropped
  CHECK(tok.tokenize("") == V{});
  CHECK(tok.encode("") == V{2, 3});
  CHECK(tok.encode("e e e e e e e") == V{2, 10, 10, 10, 10, 3});  // cut to max_seq_length
  CHECK(tok.basic_tokenize(" Hé\tllo,\u4e16\u754c ") ==
        std::vector<std::string>{"he", "llo", ",", "\u4e16", "\u754c"});
  cfg.unk = "[NOPE]";
  CHECK_THROWS_AS(WordPieceTokenizer({"[PAD]", "[CLS]", "[SEP]"}, cfg), Error);
}

TEST_CASE("embedder: embeddings match sentence-transformers, cosine >= 0.999, unit norm") {
  Embedder& e = embedder();
  REQUIRE(e.dim() == 384);
  const auto& g = golden();
  std::vector<std::string> texts;
  for (const auto& c : g["cases"]) texts.push_back(c["text"]);
  size_t calls = 0;
  const std::vector<float> out = e.embed(texts, [&](size_t done) {
    ++calls;
    CHECK(done <= texts.size());
  });
  CHECK(calls >= 1);
  REQUIRE(out.size() == texts.size() * 384);
  double worst = 1, worst_abs = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto want = g["cases"][i]["embedding"].get<std::vector<float>>();
    REQUIRE(want.size() == 384);
    const double cos = cosine(out.data() + i * 384, want);
    worst = std::min(worst, cos);
    for (int j = 0; j < 384; ++j) worst_abs = std::max(worst_abs, std::fabs(double(out[i * 384 + j]) - want[j]));
    INFO("text: " << nlohmann::json(texts[i]).dump());
    CHECK(cos >= 0.999);
    double norm = 0;
    for (int j = 0; j < 384; ++j) norm += double(out[i * 384 + j]) * out[i * 384 + j];
    CHECK(std::sqrt(norm) == doctest::Approx(1.0).epsilon(1e-5));
  }
  MESSAGE("against sentence-transformers: worst 1 - cosine " << (1 - worst) << ", worst |difference| " << worst_abs);
  // Similar sentences are closer than unrelated ones (a sanity check on the geometry).
  const auto v = e.embed({"A man is eating food.", "A man is eating a piece of bread.", "The cat sits outside."});
  auto dot = [&](int a, int b) {
    double s = 0;
    for (int j = 0; j < 384; ++j) s += double(v[a * 384 + j]) * v[b * 384 + j];
    return s;
  };
  CHECK(dot(0, 1) > dot(0, 2) + 0.3);
}

TEST_CASE("embedder: batched results equal single-sentence results, in input order") {
  Embedder& e = embedder();
  const auto& g = golden();
  std::vector<std::string> texts;
  for (size_t i : {26, 1, 13, 0, 8, 25}) texts.push_back(g["cases"][i]["text"]);  // long, short, empty
  const std::vector<float> batch = e.embed(texts);
  REQUIRE(batch.size() == texts.size() * 384);
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::vector<float> one = e.embed({texts[i]});
    double worst = 0;
    for (int j = 0; j < 384; ++j) worst = std::max(worst, std::fabs(double(one[j]) - batch[i * 384 + j]));
    INFO("text " << i);
    CHECK(worst < 1e-5);
  }
  CHECK(e.embed({}).empty());
}

TEST_CASE("embedder: the fingerprint is the files' content, the same from a copy in another folder") {
  Embedder& e = embedder();
  const std::string& f = e.fingerprint();
  CHECK(f.rfind("bert:", 0) == 0);
  CHECK(f.size() == std::string("bert:").size() + 16);
  // The same files under another folder name (linked, not copied: 90 MB) are the same embedder.
  const test::TempDir tmp("embedder-copy");
  const fs::path copy = tmp.path / "my-embedder";
  fs::create_directories(copy);
  for (const auto& entry : fs::directory_iterator(model_dir()))
    fs::create_symlink(fs::absolute(entry.path()), copy / entry.path().filename());
  auto backend = make_cpu_backend(1);
  Embedder other;
  other.load(copy, *backend);
  CHECK(other.fingerprint() == f);
}

TEST_CASE("embedder: a folder without its files fails naming the file") {
  const test::TempDir tmp("embedder");
  auto backend = make_cpu_backend(1);
  Embedder e;
  try {
    e.load(tmp.path, *backend);
    FAIL("expected an error");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find("config.json") != std::string::npos);
  }
  CHECK_THROWS_AS(e.load(tmp.path / "missing", *backend), Error);
  CHECK(!e.loaded());
}

TEST_CASE("embedder: safetensors reader reads tensors, and truncated files and bad headers fail naming the file") {
  const test::TempDir tmp("embedder");
  std::string data(24 + 4, '\0');
  const float vals[6] = {1, 2, 3, 4, 5, 6};
  std::memcpy(data.data(), vals, 24);
  const std::string good_header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("ids":{"dtype":"I32","shape":[1],"data_offsets":[24,28]}})";
  const fs::path good = tmp.path / "good.safetensors";
  write_bytes(good, safetensors_bytes(good_header, data));
  {
    SafetensorsFile f(good.string());
    REQUIRE(f.tensors().size() == 2);
    CHECK(f.metadata().at("format") == "pt");
    const auto& w = f.tensor("w");
    CHECK(w.dtype == SafetensorsDType::F32);
    CHECK(w.shape == std::vector<int64_t>{2, 3});
    CHECK(w.nbytes == 24);
    const GgufTensor gt = f.weight_view("w", {2, 3});
    CHECK(gt.ne == std::vector<int64_t>{3, 2});
    CHECK(gt.type == GgmlType::F32);
    auto b = make_cpu_backend(1);
    auto W = b->load_weight(gt);
    CHECK(W->out_features == 2);
    CHECK(W->in_features == 3);
    auto expect_error = [&](auto&& fn, const std::string& what) {
      try {
        fn();
        FAIL("expected an error");
      } catch (const Error& e) {
        const std::string msg = e.what();
        INFO(msg);
        CHECK(msg.find("good.safetensors") != std::string::npos);
        CHECK(msg.find(what) != std::string::npos);
      }
    };
    expect_error([&] { f.weight_view("w", {3, 2}); }, "expected [3, 2] for tensor 'w', got [2, 3]");
    expect_error([&] { f.weight_view("ids", {1}); }, "'ids' has dtype I32");
    expect_error([&] { f.tensor("nope"); }, "'nope' not found");
  }

  const std::string full = safetensors_bytes(good_header, data);
  struct Bad { const char* name; std::string bytes; const char* what; };
  const Bad bad[] = {
      {"short.safetensors", std::string(5, '\0'), "no header length"},
      {"truncated.safetensors", full.substr(0, full.size() - 3), "tensor 'ids' data [24, 28) is not within"},
      {"cut-header.safetensors", full.substr(0, 8 + good_header.size() / 2), "header length"},
      {"not-json.safetensors", safetensors_bytes("{\"w\": [", data), "not JSON"},
      {"not-object.safetensors", safetensors_bytes("[1, 2]", data), "expected a JSON object"},
      {"no-shape.safetensors", safetensors_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,24]}})", data),
       "'w' lacks dtype, shape or data_offsets"},
      {"dtype.safetensors", safetensors_bytes(R"({"w":{"dtype":"Q4","shape":[6],"data_offsets":[0,24]}})", data),
       "dtype 'Q4'"},
      {"size.safetensors", safetensors_bytes(R"({"w":{"dtype":"F32","shape":[7],"data_offsets":[0,24]}})", data),
       "F32 [7] needs 28"},
      {"offsets.safetensors", safetensors_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", data),
       "not within"},
      {"huge.safetensors", safetensors_bytes(R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,24]}})", data),
       "larger than the file"},
  };
  for (const Bad& b : bad) {
    const fs::path p = tmp.path / b.name;
    write_bytes(p, b.bytes);
    try {
      SafetensorsFile f(p.string());
      FAIL("expected an error for " << b.name);
    } catch (const Error& e) {
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(p.string()) != std::string::npos);
      CHECK(msg.find(b.what) != std::string::npos);
    }
  }
  CHECK_THROWS_AS(SafetensorsFile((tmp.path / "absent.safetensors").string()), Error);
}
