// A hand-built GGUF matrix tensor for the weight-loading tests of the CUDA backend
// (tests/test-cuda-ops.cpp, tests/test-cuda-int8-gemv.cpp): what load_weight sees of a matrix in a
// GGUF file, over bytes the test made.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/format/gguf.h"

namespace ragkv::test {

// [rows][cols] of type t over `bytes`, which must outlive it.
inline GgufTensor matrix_tensor(const std::string& name, GgmlType t, int64_t rows, int64_t cols,
                                const std::vector<uint8_t>& bytes) {
  GgufTensor g;
  g.name = name;
  g.type = t;
  g.ne = {cols, rows};
  g.nbytes = bytes.size();
  g.data = bytes.data();
  return g;
}

}  // namespace ragkv::test
