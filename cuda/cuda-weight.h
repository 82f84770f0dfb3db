// A weight as the CUDA backend holds it in device memory (cuda-backend.h, "Weight storage"):
// an f32 vector, an f16 matrix [out_features][in_features], or a matrix kept in its GGUF
// quantised blocks, one device buffer per stacked part (the parts of a stack may differ in type,
// e.g. the Q4_K and Q6_K parts of a Q4_K_M file). Freed through its backend. Host code only
// (core/util/error.h's fmt does not compile under nvcc).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "core/backend/backend.h"
#include "core/util/error.h"
#include "core/format/quant.h"
#include "cuda/cuda-backend.h"

namespace ragkv {

// One part of a quantised matrix: `rows` rows of the weight's in_features values of `type`,
// row r at data + r · ggml_row_bytes(type, in_features) (the GGUF bytes as they are).
struct QuantPart {
  const uint8_t* data = nullptr;  // device
  GgmlType type = GgmlType::Q8_0;
  int64_t rows = 0;
};

class CudaWeight : public Weight {
 public:
  // An f32 vector or an f16 matrix at data (device, owned).
  CudaWeight(CudaBackend* owner, void* data, DType dtype) : owner_(owner), data_(data), dtype_(dtype) {}
  // A quantised matrix; parts are added (owned) as they are uploaded.
  explicit CudaWeight(CudaBackend* owner) : owner_(owner), dtype_(DType::f16) {}
  ~CudaWeight() override {
    if (data_) owner_->raw_free(data_);
    for (const QuantPart& p : parts_) owner_->raw_free(const_cast<uint8_t*>(p.data));
  }
  CudaWeight(const CudaWeight&) = delete;
  CudaWeight& operator=(const CudaWeight&) = delete;

  // f32 for a vector; f16 for a matrix, stored as f16 or quantised (quantised() tells).
  DType dtype() const { return dtype_; }
  bool quantised() const { return !parts_.empty(); }
  float* f32() const { return static_cast<float*>(data_); }
  __half* f16() const { return static_cast<__half*>(data_); }
  std::span<const QuantPart> parts() const { return parts_; }
  void add_part(const QuantPart& p) { parts_.push_back(p); }
  // A quantised matrix's f16 copy [out_features][in_features] for prefill GEMMs
  // (RAGKV_CUDA_WEIGHTS=quant+f16): f16() returns it; owned.
  void set_f16_copy(__half* copy) { data_ = copy; }
  bool has_f16() const { return dtype_ == DType::f16 && data_ != nullptr; }
  // A matrix's largest absolute row sum Σ_k |w_jk| over its output rows (all parts), summed on the
  // host at load from the values before their rounding to f16; infinity when not known. It bounds
  // the products of a scaled operand (f16-product-bound.h).
  float max_row_l1() const { return max_row_l1_; }
  void set_max_row_l1(float v) { max_row_l1_ = v; }

 private:
  CudaBackend* owner_;
  void* data_ = nullptr;          // device [out_features][in_features] of dtype_ (a quantised one's f16 copy, or null)
  DType dtype_;                   // f32 (vectors) or f16 (matrices)
  float max_row_l1_ = std::numeric_limits<float>::infinity();
  std::vector<QuantPart> parts_;  // a quantised matrix's parts, in stack order
};

// The weight as this backend loaded it (Backend checked that it did).
inline const CudaWeight& cuda_weight(const Weight& w) { return static_cast<const CudaWeight&>(w); }

// A weight used as a vector (norm weight, bias; Backend checked its count of values): stored as
// f32 only when it has one row, so a matrix of the same count is refused.
inline const CudaWeight& cuda_vector(const Weight& w, const char* op) {
  const CudaWeight& cw = cuda_weight(w);
  if (cw.dtype() != DType::f32)
    fail("internal: CUDA {}: weight {} is a [{}][{}] matrix; the CUDA backend needs an f32 vector (one row) here",
         op, w.name, w.out_features, w.in_features);
  return cw;
}

}  // namespace ragkv
