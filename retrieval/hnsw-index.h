// HNSW index over L2-normalised rows (hnswlib, inner-product space), its on-disk graph file, and
// the staged search of RAGCache §5.3 ("pipelined vector search"): a search that exposes its
// current top-k after every slice of work and ends with exactly hnswlib's searchKnn result.
//
// hnsw-index.cpp is the only translation unit that includes hnswlib (its header defines
// non-inline functions, so a second includer would break the link).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "retrieval/vector-index.h"

namespace ragkv {

struct HnswParams {
  size_t M = 16;                 // links per node on the upper levels (2M on level 0)
  size_t ef_construction = 200;  // candidate list while inserting
  size_t ef_search = 64;         // candidate list while searching (a search for k > ef uses k)
  uint64_t seed = 100;           // level generator: same rows and params give the same graph
};

class StagedSearch;

class HnswIndex final : public VectorIndex {
 public:
  // Inserts rows (f32 [n][dim], L2-normalised) in order on one thread, so label == row and the
  // graph is a function of rows and params. progress(done, n) every few hundred rows.
  static std::unique_ptr<HnswIndex> build(std::span<const float> rows, size_t dim, const HnswParams& p,
                                          const std::function<void(size_t, size_t)>& progress = {});
  // Writes the graph atomically: links only, plus the checksum of the rows it was built over
  // (the rows themselves live in the embeddings file). Returns the checksum in its frame.
  uint64_t save(const std::filesystem::path& path) const;
  // Reads a graph written by save() over the same rows; every count, id and level is checked
  // before use. M, ef_construction and seed come from the file, ef_search from the caller.
  static std::unique_ptr<HnswIndex> load(const std::filesystem::path& path, std::span<const float> rows,
                                         size_t dim, size_t ef_search);
  ~HnswIndex() override;

  // hnswlib's searchKnn with ef = max(ef_search, k). Thread-safe.
  std::vector<Hit> search(std::span<const float> query, size_t k) const override;
  // A search run slice by slice (the index must outlive it). Thread-safe.
  StagedSearch staged_search(std::span<const float> query, size_t k) const;

  size_t size() const override;
  size_t dim() const override;
  const HnswParams& params() const;
  void set_ef_search(size_t ef);  // not while searches run

 private:
  HnswIndex();
  struct Impl;
  std::unique_ptr<Impl> impl_;
  friend class StagedSearch;
};

// RAGCache §5.3 "pipelined vector search" for HNSW: the paper slices the continuous HNSW search
// by time; here a slice is a number of distance computations (deterministic, machine
// independent). The search is hnswlib's own algorithm (greedy descent through the upper levels,
// then best-first search of level 0 with an ef-sized candidate list) re-written as a resumable
// state machine over hnswlib's graph, so after the last slice current() is exactly
// HnswIndex::search(query, k), ties and order included. During the upper-level descent current()
// holds the single closest node found so far (a pipeline that needs k candidates waits for k).
class StagedSearch {
 public:
  StagedSearch(StagedSearch&&) noexcept;
  StagedSearch& operator=(StagedSearch&&) noexcept;
  ~StagedSearch();

  // Runs up to `budget` (>= 1) more distance computations, stopping early when the search ends;
  // returns current().
  const std::vector<Hit>& step(size_t budget);
  bool done() const;
  const std::vector<Hit>& current() const;  // current top-k, best first
  size_t work() const;                      // distance computations so far

 private:
  struct State;
  std::unique_ptr<State> s_;
  explicit StagedSearch(std::unique_ptr<State> s);
  friend class HnswIndex;
};

}  // namespace ragkv
