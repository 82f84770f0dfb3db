// Retrieval index side: the XXH64 checksum, exact vs HNSW search (recall against the brute-force
// oracle, identical results after save/reload, refused corrupt graphs), the staged search of
// RAGCache §5.3 (its final top-k equals hnswlib's searchKnn for many queries and slicings), and
// INDEX_DIR build/open with a deterministic fake embedder (manifest checks, corruption,
// interrupted builds, another embedder).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/util/error.h"
#include "core/format/gguf.h"
#include "core/model/tokenizer.h"
#include "core/format/checked-file.h"
#include "retrieval/index-dir.h"
#include "retrieval/staged-metrics.h"
#include "tests/test-paths.h"
#include "tests/test-tempdir.h"
#include "tests/test-util.h"

namespace {

namespace fs = std::filesystem;
using ragkv::Hit;

using ragkv::test::TempDir;

// n random unit vectors of dimension dim (Gaussian directions), f32 [n][dim].
std::vector<float> random_rows(size_t n, size_t dim, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g;
  std::vector<float> v(n * dim);
  for (float& x : v) x = g(rng);
  for (size_t i = 0; i < n; ++i) ragkv::l2_normalize(std::span<float>(v).subspan(i * dim, dim), "row");
  return v;
}

std::span<const float> row(const std::vector<float>& m, size_t i, size_t dim) {
  return std::span<const float>(m).subspan(i * dim, dim);
}

std::vector<uint32_t> ids(const std::vector<Hit>& hits) {
  std::vector<uint32_t> v;
  for (const auto& h : hits) v.push_back(h.chunk);
  return v;
}

// Deterministic fake embedder: hashed bag of lower-cased words, dim 64 (plus a small constant so
// no text maps to the zero vector).
constexpr size_t kFakeDim = 64;
std::vector<float> fake_embed_one(const std::string& text) {
  std::vector<float> v(kFakeDim, 0.01f);
  std::string w;
  auto flush = [&] {
    if (w.empty()) return;
    const uint64_t h = ragkv::checksum64(w);
    v[h % kFakeDim] += (h >> 63) ? 1.0f : -1.0f;
    w.clear();
  };
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)))
      w += char(std::tolower(static_cast<unsigned char>(c)));
    else
      flush();
  }
  flush();
  return v;
}
std::vector<float> fake_embed(const std::vector<std::string>& texts) {
  std::vector<float> out;
  for (const auto& t : texts) {
    const auto v = fake_embed_one(t);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

using ragkv::test::smollm_tokenizer;

std::vector<ragkv::Document> synthetic_docs(int n) {
  static const char* topics[] = {"volcano",   "orchestra", "glacier", "satellite", "harvest",
                                 "cathedral", "protein",   "monsoon", "railway",   "algebra"};
  std::vector<ragkv::Document> docs;
  for (int d = 0; d < n; ++d) {
    std::string text;
    for (int s = 0; s < 20; ++s)
      text +=
          fmt::format("The {} number {} was studied by team {} in season {}. ", topics[d % 10], d, s, d * 31 + s);
    docs.push_back(ragkv::Document{fmt::format("doc-{}", d), fmt::format("Title {}", d), text, "synthetic", 0});
  }
  return docs;
}

using ragkv::test::error_of;

void flip_byte(const fs::path& p, size_t offset_from_end) {
  std::string bytes = ragkv::read_file(p);
  bytes[bytes.size() - offset_from_end] ^= 0x40;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_CASE("retrieval checksum: XXH64 reference values, streaming equals one shot") {
  CHECK(ragkv::checksum64("") == 0xEF46DB3751D8E999ULL);
  CHECK(ragkv::checksum64("abc") == 0x44BC2CF5AD770999ULL);
  CHECK(ragkv::checksum64("Nobody inspects the spammish repetition") == 0xFBCEA83C8A378BF1ULL);
  std::string s;
  for (int i = 0; i < 1000; ++i) s += char(i * 37 + 11);
  for (size_t cut : {0, 1, 7, 31, 32, 33, 100, 999}) {
    ragkv::Checksum64 c;  // a first piece of `cut` bytes, then pieces of 13
    c.update(s.data(), cut);
    for (size_t at = cut; at < s.size(); at += 13) c.update(s.data() + at, std::min<size_t>(13, s.size() - at));
    CHECK(c.digest() == ragkv::checksum64(s));
  }
  CHECK(ragkv::checksum_hex(0xABCULL) == "0000000000000abc");
}

TEST_CASE("retrieval index: HNSW recall@10 against the exact oracle, identical after save/reload") {
  const size_t n = 600, dim = 48, n_queries = 100;
  const auto rows = random_rows(n, dim, 1);
  const auto queries = random_rows(n_queries, dim, 2);
  const ragkv::ExactIndex exact(rows, dim);
  const auto hnsw = ragkv::HnswIndex::build(rows, dim, ragkv::HnswParams{});
  CHECK(hnsw->size() == n);
  CHECK(exact.size() == n);

  size_t found = 0;
  for (size_t q = 0; q < n_queries; ++q) {
    const auto want = exact.search(row(queries, q, dim), 10);
    const auto got = hnsw->search(row(queries, q, dim), 10);
    REQUIRE(want.size() == 10);
    REQUIRE(got.size() == 10);
    for (size_t i = 1; i < 10; ++i) CHECK(want[i - 1].score >= want[i].score);
    for (size_t i = 1; i < 10; ++i) CHECK(got[i - 1].score >= got[i].score);
    const auto want_ids = ids(want);
    const std::set<uint32_t> w(want_ids.begin(), want_ids.end());
    for (const auto& h : got) found += w.count(h.chunk);
    CHECK(std::abs(got[0].score - want[0].score) < 1e-5);
  }
  const double recall = double(found) / double(10 * n_queries);
  MESSAGE("HNSW recall@10 vs brute force (M=16, ef_construction=200, ef_search=64): " << recall);
  CHECK(recall >= 0.98);

  // The exact oracle finds every row itself.
  for (size_t i = 0; i < n; i += 37) CHECK(exact.search(row(rows, i, dim), 1)[0].chunk == i);
  CHECK(exact.search(row(rows, 0, dim), n + 5).size() == n);
  CHECK(hnsw->search(row(rows, 0, dim), n + 5).size() == n);
  CHECK(hnsw->search(row(rows, 0, dim), 0).empty());
  CHECK_THROWS_AS(hnsw->search(std::span<const float>(rows).subspan(0, dim - 1), 3), ragkv::Error);

  TempDir t("hnsw");
  const fs::path file = t.path / "hnsw.bin";
  hnsw->save(file);
  const auto loaded = ragkv::HnswIndex::load(file, rows, dim, 64);
  CHECK(loaded->params().M == 16);
  for (size_t q = 0; q < n_queries; ++q)
    for (size_t k : {1, 10, 100})
      CHECK(loaded->search(row(queries, q, dim), k) == hnsw->search(row(queries, q, dim), k));
  // Building again gives the same graph, byte for byte.
  const auto again = ragkv::HnswIndex::build(rows, dim, ragkv::HnswParams{});
  again->save(t.path / "again.bin");
  CHECK(ragkv::read_file(t.path / "again.bin") == ragkv::read_file(file));

  // Refused: other vectors, another dimension, a flipped byte, a truncated file.
  auto other = rows;
  other[5] += 0.25f;
  CHECK(error_of([&] { ragkv::HnswIndex::load(file, other, dim, 64); }).find("other vectors") !=
        std::string::npos);
  CHECK(error_of([&] {
          ragkv::HnswIndex::load(file, std::span<const float>(rows).subspan(0, 600 * 32), 32, 64);
        }).find("48-dimensional") != std::string::npos);
  const fs::path bad = t.path / "bad.bin";
  fs::copy_file(file, bad);
  flip_byte(bad, 100);
  CHECK(error_of([&] { ragkv::HnswIndex::load(bad, rows, dim, 64); }).find("checksum mismatch") !=
        std::string::npos);
  std::string bytes = ragkv::read_file(file);
  bytes.resize(bytes.size() / 2);
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << bytes;
  CHECK_THROWS_AS(ragkv::HnswIndex::load(bad, rows, dim, 64), ragkv::Error);
}

TEST_CASE("retrieval staged search (RAGCache §5.3): final top-k equals hnswlib's searchKnn") {
  const size_t n = 800, dim = 32, n_queries = 150;
  const auto rows = random_rows(n, dim, 3);
  const auto queries = random_rows(n_queries, dim, 4);
  ragkv::HnswParams hp;
  hp.M = 8;  // a taller graph, so the upper-level descent is exercised
  const auto hnsw = ragkv::HnswIndex::build(rows, dim, hp);
  TempDir t("staged");
  hnsw->save(t.path / "g.bin");
  const auto loaded = ragkv::HnswIndex::load(t.path / "g.bin", rows, dim, hp.ef_search);

  std::vector<double> fractions;
  for (size_t q = 0; q < n_queries; ++q) {
    const auto query = row(queries, q, dim);
    for (size_t k : {1, 5, 10, 100}) {  // 100 > ef_search: the search widens ef to k, as searchKnn does
      const auto want = hnsw->search(query, k);
      for (size_t slice : {1, 7, 64, 100000}) {
        const ragkv::HnswIndex& idx = (slice == 7) ? *loaded : *hnsw;
        auto staged = idx.staged_search(query, k);
        CHECK(staged.current().empty());
        const auto snaps = ragkv::run_staged_search(staged, slice);
        REQUIRE(!snaps.empty());
        CHECK(staged.done());
        CHECK(snaps.back().top == want);
        for (size_t i = 1; i < snaps.size(); ++i) {
          CHECK(snaps[i].work > snaps[i - 1].work);
          CHECK(snaps[i].work - snaps[i - 1].work <= slice);
        }
        for (const auto& s : snaps) CHECK(s.top.size() <= k);
        if (k == 10 && slice == 1) fractions.push_back(ragkv::final_topk_work_fraction(snaps));
        if (k == 10 && slice == 100000) CHECK(snaps.size() == 1);
      }
    }
  }
  for (double f : fractions) {
    CHECK(f > 0.0);
    CHECK(f <= 1.0);
  }
  const auto sum = ragkv::summarize_fractions(fractions);
  MESSAGE("work fraction after which the final top-10 appears (800 random vectors, dim 32): median "
          << sum.median << ", p90 " << sum.p90 << ", mean " << sum.mean);
  CHECK(sum.n == n_queries);
  CHECK(sum.median < 1.0);  // the top-10 usually settles before the search ends
}

TEST_CASE("retrieval staged search: work fraction and summaries on hand-made snapshots") {
  using ragkv::StagedSnapshot;
  const std::vector<Hit> a = {{1, 0.9f}, {2, 0.8f}}, b = {{1, 0.9f}, {3, 0.85f}};
  CHECK(ragkv::final_topk_work_fraction({{10, a}, {20, b}, {30, b}, {40, b}}) == doctest::Approx(0.5));
  CHECK(ragkv::final_topk_work_fraction({{10, b}, {20, a}, {30, b}}) == doctest::Approx(1.0));
  CHECK(ragkv::final_topk_work_fraction({{10, b}, {40, b}}) == doctest::Approx(0.25));
  const auto s = ragkv::summarize_fractions({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0});
  CHECK(s.median == doctest::Approx(0.55));
  CHECK(s.p90 == doctest::Approx(0.91));
  CHECK(s.mean == doctest::Approx(0.55));
  CHECK_THROWS_AS(ragkv::final_topk_work_fraction({}), ragkv::Error);
}

TEST_CASE("retrieval index dir: build, open and search, the manifest written last and checked") {
  const auto& tok = smollm_tokenizer();
  const auto docs = synthetic_docs(40);
  TempDir t("indexdir");
  const fs::path dir = t.path / "index";
  ragkv::IndexBuildOptions opt;
  opt.chunking.chunk_tokens = 64;
  opt.chunking.chunk_overlap = 8;
  opt.tokenizer_fingerprint = "smollm2-135m-test";
  opt.embedder_fingerprint = "fake-bow-64";
  opt.embed_batch = 7;
  fs::create_directories(dir);
  std::ofstream(dir / "hnsw.bin.tmp.999") << "left by a killed build";
  std::map<std::string, std::pair<size_t, size_t>> last;  // stage -> (done, total)
  const auto m =
      ragkv::build_index_dir(dir, docs, tok, fake_embed, opt, [&](std::string_view stage, size_t d, size_t total) {
        auto& l = last[std::string(stage)];
        CHECK(d > l.first);
        l = {d, total};
      });
  CHECK(m.n_documents == 40);
  CHECK(m.n_chunks > 40);
  CHECK(m.dim == kFakeDim);
  for (const char* stage : {"chunk", "embed", "index"}) {
    INFO(stage);
    REQUIRE(last.count(stage));
    CHECK(last[stage].first == last[stage].second);
  }
  CHECK(last["embed"].second == m.n_chunks);
  for (const char* f : {"manifest.json", "chunks.jsonl", "embeddings.bin", "hnsw.bin"}) CHECK(fs::exists(dir / f));
  for (const auto& e : fs::directory_iterator(dir))
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);

  const auto manifest = nlohmann::json::parse(ragkv::read_file(dir / "manifest.json"));
  CHECK(manifest["complete"] == true);
  CHECK(manifest["format_version"] == 1);
  CHECK(manifest["tokenizer_fingerprint"] == "smollm2-135m-test");
  CHECK(manifest["embedder_fingerprint"] == "fake-bow-64");
  CHECK(manifest["chunking"]["chunk_tokens"] == 64);
  CHECK(manifest["chunking"]["chunk_overlap"] == 8);
  CHECK(manifest["hnsw"]["M"] == 16);
  CHECK(manifest["hnsw"]["ef_search"] == 64);
  CHECK(manifest["counts"]["chunks"] == m.n_chunks);

  {
    const auto idx = ragkv::IndexDir::open(dir, "fake-bow-64");
    CHECK(idx.manifest().n_chunks == m.n_chunks);
    CHECK(idx.manifest().tokenizer_fingerprint == "smollm2-135m-test");
    CHECK(idx.manifest().chunking.chunk_overlap == 8);
    REQUIRE(idx.chunks().size() == m.n_chunks);
    const auto expected = ragkv::chunk_corpus(docs, tok, opt.chunking);
    for (size_t i = 0; i < expected.size(); ++i) {
      CHECK(idx.chunks()[i].id == expected[i].id);
      CHECK(idx.chunks()[i].text == expected[i].text);
      CHECK(idx.chunks()[i].offset == expected[i].offset);
      CHECK(idx.chunks()[i].n_tokens == expected[i].n_tokens);
    }
    // Each chunk's own text finds it first, by HNSW and by brute force; the embeddings are unit rows.
    for (size_t i = 0; i < idx.chunks().size(); i += 5) {
      const auto q = fake_embed_one(ragkv::chunk_embedding_text(idx.chunks()[i]));
      const auto h = idx.search(q, 3);
      const auto e = idx.search(q, 3, true);
      REQUIRE(h.size() == 3);
      CHECK(e[0].chunk == i);
      CHECK(h[0].chunk == i);
      CHECK(e[0].score == doctest::Approx(1.0).epsilon(1e-4));
      auto staged = idx.staged_search(q, 3);
      CHECK(ragkv::run_staged_search(staged, 16).back().top == h);
    }
    double norm = 0;
    for (size_t j = 0; j < kFakeDim; ++j) norm += double(idx.embeddings()[j]) * idx.embeddings()[j];
    CHECK(norm == doctest::Approx(1.0));
  }

  // Another embedder, a missing manifest, corrupt files: clear errors.
  CHECK(error_of([&] {
          ragkv::IndexDir::open(dir, "minilm-l6");
        }).find("index built with embedder \"fake-bow-64\", this run embeds with \"minilm-l6\"") !=
        std::string::npos);
  CHECK(error_of([&] { ragkv::IndexDir::open(t.path / "nope", "x"); }).find("no such index directory") !=
        std::string::npos);
  const fs::path copy = t.path / "copy";
  auto fresh_copy = [&] {
    fs::remove_all(copy);
    fs::copy(dir, copy);
  };
  fresh_copy();
  flip_byte(copy / "embeddings.bin", 20);
  CHECK(error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); }).find("embeddings.bin: checksum differs") !=
        std::string::npos);
  fresh_copy();
  fs::resize_file(copy / "hnsw.bin", fs::file_size(copy / "hnsw.bin") - 4);
  CHECK(error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); }).find("hnsw.bin:") != std::string::npos);
  fresh_copy();
  std::ofstream(copy / "chunks.jsonl", std::ios::app) << "{}\n";
  CHECK(error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); }).find("chunks.jsonl:") != std::string::npos);
  fresh_copy();
  auto mj = nlohmann::json::parse(ragkv::read_file(copy / "manifest.json"));
  mj["counts"]["chunks"] = m.n_chunks + 1;
  std::ofstream(copy / "manifest.json", std::ios::trunc) << mj.dump();
  CHECK(error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); }).find("the manifest says") !=
        std::string::npos);
  mj["counts"]["chunks"] = m.n_chunks;
  mj["complete"] = false;
  std::ofstream(copy / "manifest.json", std::ios::trunc) << mj.dump();
  CHECK(error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); }).find("did not complete") !=
        std::string::npos);
  std::ofstream(copy / "manifest.json", std::ios::trunc) << "{\"format\": ";
  CHECK(error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); }).find("malformed manifest") !=
        std::string::npos);
  // Fuzz regression (fuzz/fuzz-index.cpp): a count written as a float beyond size_t (1e47) was
  // converted by nlohmann's get<size_t>() with an undefined cast; an integer beyond int wrapped.
  mj["complete"] = true;
  for (const auto& [field, value] : {std::pair{"dim", nlohmann::json(1e47)}, std::pair{"dim", nlohmann::json(384.5)},
                                     std::pair{"chunk_tokens", nlohmann::json(int64_t(1) << 32 | 64)}}) {
    CAPTURE(field);
    auto bad = mj;
    (std::string(field) == "dim" ? bad["embedding"]["dim"] : bad["chunking"]["chunk_tokens"]) = value;
    std::ofstream(copy / "manifest.json", std::ios::trunc) << bad.dump();
    const std::string msg = error_of([&] { ragkv::IndexDir::open(copy, "fake-bow-64"); });
    CHECK(msg.find((copy / "manifest.json").string() + ": malformed manifest") != std::string::npos);
    CHECK(msg.find(value.is_number_float() ? "must be an integer" : "out of range") != std::string::npos);
  }

  // An interrupted rebuild (the embedder fails half way) leaves no index that looks complete.
  size_t calls = 0;
  const ragkv::EmbedFn failing = [&](const std::vector<std::string>& texts) {
    if (++calls == 3) throw ragkv::Error("embedder crashed");
    return fake_embed(texts);
  };
  CHECK(error_of([&] { ragkv::build_index_dir(dir, docs, tok, failing, opt); }) == "embedder crashed");
  CHECK(!fs::exists(dir / "manifest.json"));
  CHECK(error_of([&] { ragkv::IndexDir::open(dir, "fake-bow-64"); }).find("not a complete index") !=
        std::string::npos);

  // Bad embedder output is refused with the chunk named.
  const ragkv::EmbedFn zero = [](const std::vector<std::string>& texts) {
    return std::vector<float>(texts.size() * 8, 0.0f);
  };
  CHECK(error_of([&] { ragkv::build_index_dir(dir, docs, tok, zero, opt); }).find("embedding of chunk doc-0#0") !=
        std::string::npos);
  const ragkv::EmbedFn ragged = [](const std::vector<std::string>& texts) {
    return std::vector<float>(texts.size() * 8 + 1, 1.0f);
  };
  CHECK(error_of([&] { ragkv::build_index_dir(dir, docs, tok, ragged, opt); }).find("embedder returned") !=
        std::string::npos);
}

TEST_CASE("retrieval index dir: --update embeds only what changed and switches generations with one rename") {
  const auto& tok = smollm_tokenizer();
  std::vector<ragkv::Document> docs = synthetic_docs(12);
  TempDir t("index-update");
  const fs::path dir = t.path / "index";
  ragkv::IndexBuildOptions opt;
  opt.chunking.chunk_tokens = 64;
  opt.chunking.chunking = ragkv::Chunking::content;
  opt.tokenizer_fingerprint = "smollm2-135m-test";
  opt.embedder_fingerprint = "fake-bow-64";
  size_t embedded = 0;
  const ragkv::EmbedFn counting = [&](const std::vector<std::string>& texts) {
    embedded += texts.size();
    return fake_embed(texts);
  };
  const auto m0 = ragkv::build_index_dir(dir, docs, tok, counting, opt);
  const ragkv::IndexDir before = ragkv::IndexDir::open(dir, "fake-bow-64");  // a reader of generation 0
  CHECK(before.generation().empty());

  // Version 2: a sentence inserted into doc-3, doc-7 removed, doc-12 added.
  docs[3].text.insert(docs[3].text.find(". ") + 2, "A sentence added in the second version. ");
  docs.erase(docs.begin() + 7);
  docs.push_back(synthetic_docs(13).back());
  embedded = 0;
  opt.chunking.chunking = ragkv::Chunking::fixed;  // ignored: the index's own chunking is kept
  const ragkv::IndexUpdate u = ragkv::update_index_dir(dir, docs, tok, counting, opt);
  CHECK(u.generation == "gen-1");
  CHECK(u.previous_generation.empty());
  CHECK(u.manifest.chunking.chunking == ragkv::Chunking::content);
  CHECK(u.embedded == embedded);
  CHECK(u.removed > 0);  // doc-7's chunks, and doc-3's edited ones
  CHECK(u.added > 0);
  CHECK(u.unchanged + u.added == u.manifest.n_chunks);
  CHECK(embedded <= u.added);  // only new texts reach the embedder
  CHECK(u.reused_embeddings > 0);

  // The new index equals a fresh build of version 2 (chunks; rows to float rounding).
  const ragkv::IndexDir after = ragkv::IndexDir::open(dir, "fake-bow-64");
  CHECK(after.generation() == "gen-1");
  opt.chunking.chunking = ragkv::Chunking::content;
  ragkv::build_index_dir(t.path / "fresh", docs, tok, fake_embed, opt);
  const ragkv::IndexDir fresh = ragkv::IndexDir::open(t.path / "fresh", "fake-bow-64");
  REQUIRE(after.chunks().size() == fresh.chunks().size());
  for (size_t i = 0; i < fresh.chunks().size(); ++i) {
    CHECK(after.chunks()[i].id == fresh.chunks()[i].id);
    CHECK(after.chunks()[i].text == fresh.chunks()[i].text);
  }
  for (size_t i = 0; i < fresh.embeddings().size(); ++i) CHECK(after.embeddings()[i] == doctest::Approx(fresh.embeddings()[i]).epsilon(1e-6));
  // The reader of generation 0 still reads its own files (they stay as the previous generation).
  CHECK(ragkv::IndexDir::open(dir, "fake-bow-64").chunks().size() == after.chunks().size());
  CHECK(fs::exists(dir / "chunks.jsonl"));
  CHECK(before.chunks().size() == m0.n_chunks);
  CHECK(before.previous_chunks().empty());  // never updated
  // The donors of the next precompute: generation 0's chunks.
  const std::vector<ragkv::Chunk> previous = after.previous_chunks();
  REQUIRE(previous.size() == before.chunks().size());
  for (size_t i = 0; i < previous.size(); ++i) CHECK(previous[i].text == before.chunks()[i].text);

  // A second update: gen-2, gen-1 kept as the previous generation, generation 0's files removed.
  embedded = 0;
  const ragkv::IndexUpdate u2 = ragkv::update_index_dir(dir, docs, tok, counting, opt);
  CHECK(u2.generation == "gen-2");
  CHECK(u2.previous_generation == "gen-1");
  CHECK(embedded == 0);  // nothing changed
  CHECK(u2.unchanged == u2.manifest.n_chunks);
  CHECK(fs::is_directory(dir / "gen-1"));
  CHECK_FALSE(fs::exists(dir / "chunks.jsonl"));
  CHECK(ragkv::IndexDir::open(dir, "fake-bow-64").generation() == "gen-2");
  CHECK(ragkv::IndexDir::open(dir, "fake-bow-64").previous_chunks().size() == after.chunks().size());  // gen-1's
  // A fresh build over it makes the generations stale: removed.
  ragkv::build_index_dir(dir, docs, tok, fake_embed, opt);
  CHECK_FALSE(fs::exists(dir / "gen-1"));
  CHECK_FALSE(fs::exists(dir / "gen-2"));
  CHECK(ragkv::IndexDir::open(dir, "fake-bow-64").generation().empty());
}
