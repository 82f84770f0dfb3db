// INDEX_DIR (DESIGN.md §1): building it from documents and an embedding function, and opening
// it for search. Files:
//   chunks.jsonl    one chunk a line: {"id","doc","offset","title","text","n_tokens"}
//   embeddings.bin  framed (checked-file.h), magic "RKVEMB\0\0", version 1, body:
//                   u32 dim, u32 fingerprint length, u64 n, embedder fingerprint bytes,
//                   f32 [n][dim] L2-normalised rows (row i embeds chunk i)
//   hnsw.bin        the HNSW graph over those rows (hnsw-index.cpp)
//   manifest.json   format version, "complete": true, tokenizer and embedder fingerprints,
//                   chunking and HNSW parameters, counts, and size + XXH64 of every file above.
// Every file is written atomically, and the manifest last (an older one is removed first), so an
// interrupted build leaves no index that looks complete. open() checks the manifest, the files'
// sizes and checksums, the counts, and that the index was built by the caller's embedder.
//
// Generations (`build-index --update`): an update writes the three files, and a manifest, into
// INDEX_DIR/gen-<k>/ and then replaces INDEX_DIR/manifest.json — the same manifest plus
// "generation": "gen-<k>" — with one rename, so a reader sees the old index or the new one, never
// a mix, and one that opened the old keeps reading it: the previous generation's files stay (they
// are the donors of the next precompute) and older ones are removed.
#pragma once
#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "retrieval/chunker.h"
#include "retrieval/hnsw-index.h"

namespace ragkv {

// Embeds a batch of texts: returns texts.size() × dim floats, row-major (any norm; the index
// normalises). The real one is the BERT embedder; tests pass a deterministic fake.
using EmbedFn = std::function<std::vector<float>(const std::vector<std::string>& texts)>;
// Build progress: stage is "chunk" (document text bytes), "embed" (chunks) or "index" (HNSW inserts).
using BuildProgressFn = std::function<void(std::string_view stage, size_t done, size_t total)>;

struct IndexBuildOptions {
  ChunkParams chunking;
  HnswParams hnsw;
  std::string tokenizer_fingerprint;  // recorded; identifies the LLM tokenizer that counted tokens
  std::string embedder_fingerprint;   // recorded and checked by open()
  size_t embed_batch = 64;            // texts per EmbedFn call
};

struct IndexManifest {
  int format_version = 0;
  std::string tokenizer_fingerprint, embedder_fingerprint;
  ChunkParams chunking;
  size_t n_documents = 0, n_chunks = 0, dim = 0;
  HnswParams hnsw;
};

constexpr int kIndexFormatVersion = 1;

// Chunks docs with opt.chunking and writes INDEX_DIR (created if missing). Returns the manifest.
IndexManifest build_index_dir(const std::filesystem::path& dir, const std::vector<Document>& docs,
                              const Tokenizer& tok, const EmbedFn& embed, const IndexBuildOptions& opt,
                              const BuildProgressFn& progress = {});
// The same from ready chunks (the caller vouches that they were made with opt.chunking).
IndexManifest write_index_dir(const std::filesystem::path& dir, const std::vector<Chunk>& chunks,
                              size_t n_documents, const EmbedFn& embed, const IndexBuildOptions& opt,
                              const BuildProgressFn& progress = {});

// `build-index --update`: dir's index brought to docs. Chunked with the index's own parameters;
// a chunk whose embedding text the index already holds takes its row (not embedded again), the
// rest are embedded; the HNSW graph is built again over all rows (at the sizes measured here,
// seconds beside the embedding: bench/results); written as the next generation (above).
struct IndexUpdate {
  IndexManifest manifest;
  std::string generation, previous_generation;  // "gen-<k>"; "" for the top-level files
  size_t unchanged = 0;         // chunks with the id and text of a chunk of the previous index
  size_t added = 0, removed = 0;  // chunk ids new to it, and of it no longer there
  size_t embedded = 0;          // texts the embedder was called on
  size_t reused_embeddings = 0;  // rows taken from the previous index
};
IndexUpdate update_index_dir(const std::filesystem::path& dir, const std::vector<Document>& docs, const Tokenizer& tok,
                             const EmbedFn& embed, IndexBuildOptions opt, const BuildProgressFn& progress = {});

class IndexDir {
 public:
  // Error unless dir holds a complete, intact index built with embedder_fingerprint (an empty
  // fingerprint skips that check, for tools that only read chunks).
  static IndexDir open(const std::filesystem::path& dir, std::string_view embedder_fingerprint);
  IndexDir(IndexDir&&) noexcept;
  IndexDir& operator=(IndexDir&&) noexcept;
  ~IndexDir();

  const IndexManifest& manifest() const;
  const std::string& generation() const;  // "gen-<k>", or "" for an index never updated
  // "" when the index was built with the tokenizer of this fingerprint (core/model/tokenizer.h), else
  // one line saying so: its chunk lengths were counted in another model's tokens. Callers warn
  // rather than fail — a chunk is tokenized again by the model that uses it, so answers are
  // right, only the chunk lengths differ from --chunk-tokens (the Gemma evaluations in
  // bench/results use an index built with SmolLM2's tokenizer on purpose).
  std::string tokenizer_mismatch(std::string_view tokenizer_fingerprint) const;
  const std::vector<Chunk>& chunks() const;
  // The previous generation's chunks (before the last `build-index --update`): the donors of
  // edited chunks (core/rag/donor-reuse.h). Empty for an index never updated, or when that
  // generation's files are gone. Not checked against a manifest: a donor is used only through
  // its cache, whose header must match the tokens read here.
  std::vector<Chunk> previous_chunks() const;
  std::span<const float> embeddings() const;  // f32 [n_chunks][dim]
  const HnswIndex& hnsw() const;
  HnswIndex& hnsw();  // e.g. set_ef_search
  const ExactIndex& exact() const;

  // Top-k chunks for a query embedding (normalised here), by HNSW or, with exact, brute force.
  std::vector<Hit> search(std::span<const float> query, size_t k, bool exact = false) const;
  // Staged HNSW search (RAGCache §5.3) for a query embedding (normalised here).
  StagedSearch staged_search(std::span<const float> query, size_t k) const;

 private:
  IndexDir();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ragkv
