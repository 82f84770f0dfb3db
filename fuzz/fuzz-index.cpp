// Fuzz target: INDEX_DIR (retrieval/index-dir.*): manifest.json, chunks.jsonl, embeddings.bin and
// hnsw.bin (retrieval/hnsw-index.*), opened as answer and search open them, then searched by HNSW,
// by brute force and by the staged search. Byte 0 of the input holds flags, the rest is the four
// files cut by fuzz-common.h's separator. The files are checksummed three ways (the frames of the
// binary files, the manifest's size + XXH64 of each file, the graph's checksum of the rows); each
// flag makes the harness rewrite one of them to match the fuzzed bytes, so the fuzzer reaches the
// parsers behind them: 1 the frames, 2 the manifest's "files", 4 the graph's row checksum.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "core/format/checksum.h"
#include "fuzz/fuzz-common.h"
#include "retrieval/hnsw-index.h"
#include "retrieval/index-dir.h"

using namespace ragkv;

namespace {

void fix_frame(std::string& f) {
  if (f.size() < 20) return;
  const uint64_t sum = checksum64(f.data(), f.size() - 8);
  std::memcpy(f.data() + f.size() - 8, &sum, 8);
}

// The rows of embeddings.bin (its layout in retrieval/index-dir.h), or empty.
std::string_view embedding_rows(const std::string& e) {
  if (e.size() < 12 + 16 + 8) return {};
  uint32_t fp_len;
  std::memcpy(&fp_len, e.data() + 16, 4);
  if (fp_len > e.size() - 12 - 16 - 8) return {};
  return std::string_view(e).substr(12 + 16 + fp_len, e.size() - 12 - 16 - fp_len - 8);
}

nlohmann::json file_entry(const std::string& name, const std::string& bytes) {
  return {{"name", name}, {"bytes", bytes.size()}, {"xxh64", checksum_hex(checksum64(bytes))}};
}

void search(const IndexDir& index) {
  const size_t dim = index.manifest().dim;
  if (dim == 0 || dim > 4096) return;
  std::vector<float> q(dim);
  for (size_t i = 0; i < dim; ++i) q[i] = float(i % 3) - 0.5f;
  const auto exact = index.search(q, 3, true);
  const auto hnsw = index.search(q, 3, false);
  for (const Hit& h : exact) RAGKV_FUZZ_CHECK(h.chunk < index.chunks().size(), "exact hit {} of {}", h.chunk, index.chunks().size());
  for (const Hit& h : hnsw) RAGKV_FUZZ_CHECK(h.chunk < index.chunks().size(), "hnsw hit {} of {}", h.chunk, index.chunks().size());
  StagedSearch s = index.staged_search(q, 3);
  for (int i = 0; i < 100000 && !s.done(); ++i) s.step(7);
  RAGKV_FUZZ_CHECK(s.done(), "staged search not done after 700000 distance computations");
  RAGKV_FUZZ_CHECK(s.current().size() == hnsw.size(), "staged search: {} hits, searchKnn {}", s.current().size(),
                   hnsw.size());
  for (size_t i = 0; i < hnsw.size(); ++i)
    RAGKV_FUZZ_CHECK(s.current()[i].chunk == hnsw[i].chunk, "staged hit {} is {}, searchKnn's {}", i, s.current()[i].chunk,
                     hnsw[i].chunk);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t flags = data[0];
  const auto parts = fuzz::split_parts(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1), 4);
  std::string manifest(parts[0]), chunks(parts[1]), embeddings(parts[2]), graph(parts[3]);
  if (flags & 4) {
    const std::string_view rows = embedding_rows(embeddings);
    const uint64_t sum = checksum64(rows.data(), rows.size());
    if (graph.size() >= 12 + 64 + 8) std::memcpy(graph.data() + 12 + 56, &sum, 8);
  }
  if (flags & 1) {
    fix_frame(embeddings);
    fix_frame(graph);
  }
  if (flags & 2) {
    nlohmann::json j = nlohmann::json::parse(manifest, nullptr, false);
    if (j.is_object()) {
      j["files"] = {{"chunks", file_entry("chunks.jsonl", chunks)},
                    {"embeddings", file_entry("embeddings.bin", embeddings)},
                    {"hnsw", file_entry("hnsw.bin", graph)}};
      manifest = j.dump();
    }
  }
  const auto dir = fuzz::scratch_dir() / "index";
  std::filesystem::remove_all(dir);
  fuzz::write_scratch("index/manifest.json", manifest);
  fuzz::write_scratch("index/chunks.jsonl", chunks);
  fuzz::write_scratch("index/embeddings.bin", embeddings);
  fuzz::write_scratch("index/hnsw.bin", graph);
  fuzz::expect_ok_or_error(dir.string(), [&] {
    const IndexDir index = IndexDir::open(dir, "");
    index.tokenizer_mismatch("gpt2/smollm/49152/0000000000000000");
    search(index);
  });
  return 0;
}
