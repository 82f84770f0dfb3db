// Helpers shared by the backend op tests: random inputs, host <-> backend copies, weights made
// from host floats through the normal GGUF loading path, and the relative error measure.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/backend/backend.h"
#include "core/format/gguf.h"

namespace ragkv::test {

inline std::vector<float> random_vec(size_t n, uint64_t seed, float scale = 1.f, float mean = 0.f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline Tensor upload(Backend& b, const std::vector<float>& v, int64_t rows, int64_t cols) {
  Tensor t = b.alloc(DType::f32, rows, cols);
  b.upload(t, v.data());
  return t;
}

inline std::vector<float> download(Backend& b, const Tensor& t) {
  std::vector<float> v(size_t(t.numel()));
  b.download(t, v.data());
  return v;
}

// A weight [out][in] (a vector when out == 1) backed by host floats that outlive the call.
inline std::unique_ptr<Weight> weight_from(Backend& b, std::vector<float>& host, int64_t out, int64_t in) {
  GgufTensor t;
  t.name = "test.weight";
  t.type = GgmlType::F32;
  t.ne = out == 1 ? std::vector<int64_t>{in} : std::vector<int64_t>{in, out};
  t.nbytes = host.size() * 4;
  t.data = reinterpret_cast<const uint8_t*>(host.data());
  return b.load_weight(t);
}

inline std::unique_ptr<Weight> vector_weight(Backend& b, std::vector<float>& host) {
  return weight_from(b, host, 1, int64_t(host.size()));
}

// max |a − ref| / (1 + |ref|)
inline double max_rel_err(const std::vector<float>& a, const std::vector<float>& ref) {
  REQUIRE(a.size() == ref.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - ref[i]) / (1.0 + std::fabs(ref[i])));
  return worst;
}

}  // namespace ragkv::test
