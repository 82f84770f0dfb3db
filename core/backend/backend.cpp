// Backend-independent parts of the backend interface: storage, tensor views, RoPE frequencies.
#include "core/backend/backend.h"

#include <cmath>

#include "core/util/error.h"

namespace ragkv {

size_t dtype_size(DType t) { return t == DType::f32 ? 4 : 2; }
const char* dtype_name(DType t) { return t == DType::f32 ? "f32" : "f16"; }

Storage::~Storage() {
  if (owner_ && data_) owner_->raw_free(data_);
}

Tensor Tensor::slice_rows(int64_t first, int64_t n) const {
  if (first < 0 || n < 0 || first + n > rows)
    fail("internal: row slice [{}, {}) outside a tensor of {} rows", first, first + n, rows);
  Tensor t = *this;
  t.byte_offset += static_cast<size_t>(first * cols) * dtype_size(dtype);
  t.rows = n;
  return t;
}

Tensor Tensor::reshape(int64_t new_rows, int64_t new_cols) const {
  if (new_rows * new_cols != rows * cols)
    fail("internal: cannot view [{}][{}] as [{}][{}]", rows, cols, new_rows, new_cols);
  Tensor t = *this;
  t.rows = new_rows;
  t.cols = new_cols;
  return t;
}

Tensor Backend::alloc(DType dtype, int64_t rows, int64_t cols) {
  Tensor t;
  t.dtype = dtype;
  t.rows = rows;
  t.cols = cols;
  const size_t bytes = std::max<size_t>(1, static_cast<size_t>(rows * cols) * dtype_size(dtype));
  t.storage = std::make_shared<Storage>(this, raw_alloc(bytes), bytes);
  return t;
}

void Backend::check_copy(const Tensor& src, const Tensor& dst) {
  if (src.dtype != dst.dtype || src.rows != dst.rows || src.cols != dst.cols)
    fail("internal: copy of {} [{}][{}] into {} [{}][{}]", dtype_name(src.dtype), src.rows, src.cols,
         dtype_name(dst.dtype), dst.rows, dst.cols);
  if (src.empty()) return;
  const auto s0 = reinterpret_cast<uintptr_t>(src.data()), d0 = reinterpret_cast<uintptr_t>(dst.data());
  if (s0 < d0 + dst.bytes() && d0 < s0 + src.bytes()) fail("internal: copy between overlapping tensors");
}

std::vector<float> rope_inv_freq(const RopeParams& p) {
  std::vector<float> inv(static_cast<size_t>(p.n_rot / 2));
  for (int i = 0; i < p.n_rot / 2; ++i) {
    double f = std::pow(double(p.freq_base), -2.0 * i / p.n_rot);
    if (!p.freq_factors.empty()) f /= p.freq_factors[i];
    inv[i] = float(f);
  }
  return inv;
}

}  // namespace ragkv
