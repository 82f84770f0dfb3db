// Vector search behind one small interface (after hnswlib's space/index split, STYLE.md):
// ExactIndex, a brute-force scan that is the test oracle and `search --exact`, and HnswIndex
// (retrieval/hnsw-index.h). Rows are L2-normalised float vectors, the score is their inner
// product with the query (cosine similarity), and a hit names its row (the chunk index).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace ragkv {

struct Hit {
  uint32_t chunk = 0;  // row of the embedding matrix == index into chunks.jsonl
  float score = 0;     // inner product with the query (HNSW: 1 - hnswlib's distance)
  bool operator==(const Hit&) const = default;
};

class VectorIndex {
 public:
  virtual ~VectorIndex() = default;
  // The min(k, size()) rows most similar to query (dim() floats, L2-normalised), best first.
  virtual std::vector<Hit> search(std::span<const float> query, size_t k) const = 0;
  virtual size_t size() const = 0;
  virtual size_t dim() const = 0;
};

// Brute force over a row-major matrix it does not own (rows must outlive it). Ties in score go
// to the lower row.
class ExactIndex final : public VectorIndex {
 public:
  ExactIndex(std::span<const float> rows, size_t dim);  // rows.size() must be a multiple of dim
  std::vector<Hit> search(std::span<const float> query, size_t k) const override;
  size_t size() const override { return n_; }
  size_t dim() const override { return dim_; }

 private:
  std::span<const float> rows_;  // f32 [n][dim]
  size_t n_ = 0, dim_ = 0;
};

// Scales v to unit L2 norm in place; Error naming `what` when v is zero or not finite.
void l2_normalize(std::span<float> v, std::string_view what);

// Checks a query against an index's dimension; Error otherwise.
void check_query_dim(std::span<const float> query, size_t dim);

}  // namespace ragkv
