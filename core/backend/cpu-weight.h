// How the CPU backend holds a weight: each part (one tensor, or each matrix of a stack) keeps its
// GGUF type and bytes — where they lie in the mapped model file when the caller allows it
// (WeightMemory::in_place), else copied — so memory stays the file's size. With
// WeightMemory::kernel_layout, where the CPU has the AVX-512 VNNI kernels, Q4_K parts are repacked
// for them and other quantised parts copied as they are, both into memory backed by huge pages
// where the system allows, and the file's pages released: memory still stays about the file's
// size, and a decode step streams fewer pages. F32
// matrices are used by SGEMM as they are; vectors (norm weights, biases) are also kept as f32 for
// the row ops.
#pragma once
#include <cstdint>
#include <vector>

#include "core/backend/backend.h"
#include "core/format/quant.h"
#include "core/util/page-memory.h"

namespace ragkv {

struct CpuWeightPart {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;  // [rows] rows of row_bytes, in the GGUF block layout of type
  size_t row_bytes = 0;
  int64_t rows = 0;
  int64_t first_row = 0;          // its first row in the stack
  // The rows in the Q4KRows16 layout (quant-kernels.h), kept by the weight's kernel_layout, when
  // loaded with WeightMemory::kernel_layout on a CPU with those kernels: the products read these
  // (data stays valid, its pages released: cpu-backend.cpp).
  const uint8_t* rows16 = nullptr;
};

class CpuWeight : public Weight {
 public:
  std::vector<CpuWeightPart> parts;
  std::vector<uint8_t> owned;     // the parts' bytes when copied (WeightMemory::copy), each part at a
                                  // multiple of 64 bytes (F32 parts are read as floats)
  std::vector<float> values;      // a vector weight (one row) as f32: norm weights, biases
  PageMemory kernel_layout;       // kernel_layout's parts (rows16 groups or copied rows), 64-aligned each
};

inline const CpuWeight& cpu_weight(const Weight& w) { return static_cast<const CpuWeight&>(w); }

}  // namespace ragkv
