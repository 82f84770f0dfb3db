// Exact (brute-force) inner-product search, the oracle beside HNSW, and vector helpers.
#include "retrieval/vector-index.h"

#include <algorithm>
#include <cmath>

#include "core/util/error.h"

namespace ragkv {

namespace {

// Inner product with 8 independent partial sums, so the compiler can vectorise it.
float dot(const float* a, const float* b, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

bool better(const Hit& x, const Hit& y) { return x.score > y.score || (x.score == y.score && x.chunk < y.chunk); }

}  // namespace

void check_query_dim(std::span<const float> query, size_t dim) {
  if (query.size() != dim) fail("query vector has {} dimensions, the index has {}", query.size(), dim);
}

void l2_normalize(std::span<float> v, std::string_view what) {
  double ss = 0;
  for (float x : v) ss += double(x) * double(x);
  if (!std::isfinite(ss)) fail("{}: vector has a non-finite component", what);
  if (ss <= 0) fail("{}: vector is all zeros, cannot be normalised", what);
  const float inv = float(1.0 / std::sqrt(ss));
  for (float& x : v) x *= inv;
}

ExactIndex::ExactIndex(std::span<const float> rows, size_t dim) : rows_(rows), dim_(dim) {
  if (dim == 0 || rows.size() % dim != 0)
    fail("exact index: {} floats is not a whole number of rows of dimension {}", rows.size(), dim);
  n_ = rows.size() / dim;
}

std::vector<Hit> ExactIndex::search(std::span<const float> query, size_t k) const {
  check_query_dim(query, dim_);
  std::vector<Hit> all(n_);
  const long n = long(n_);
#pragma omp parallel for schedule(static) if (n_ * dim_ >= (1u << 20))
  for (long i = 0; i < n; ++i)
    all[size_t(i)] = Hit{uint32_t(i), dot(query.data(), rows_.data() + size_t(i) * dim_, dim_)};
  k = std::min(k, n_);
  std::partial_sort(all.begin(), all.begin() + long(k), all.end(), better);
  all.resize(k);
  return all;
}

}  // namespace ragkv
