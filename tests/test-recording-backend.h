// A backend for tests of what calls a backend receives: host memory, op implementations that
// only count their calls, (op, dtype) pairs it may be told not to support, and the host memory
// it is asked to pin and unpin (Backend::pin_host_memory).
#pragma once
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/backend/backend.h"

namespace ragkv::test {

class RecordingBackend : public Backend {
 public:
  std::vector<std::pair<BackendOp, DType>> unsupported;
  int impl_calls = 0;

  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return "recording"; }
  void set_threads(int) override {}
  bool supports(BackendOp op, DType dtype) const override {
    for (const auto& [o, d] : unsupported)
      if (o == op && d == dtype) return false;
    return backend_op_defined(op, dtype);
  }
  void* raw_alloc(size_t bytes) override { return std::calloc(bytes, 1); }
  void raw_free(void* p) override { std::free(p); }
  void upload(const Tensor& dst, const void* src) override { std::memcpy(dst.data(), src, dst.bytes()); }
  void download(const Tensor& src, void* dst) override { std::memcpy(dst, src.data(), src.bytes()); }
  void fill_zero(const Tensor& t) override { std::memset(t.data(), 0, t.bytes()); }
  std::vector<std::pair<const void*, size_t>> pinned;  // pin_host_memory's calls
  std::vector<const void*> unpinned;                    // unpin_host_memory's calls
  void pin_host_memory(const void* p, size_t bytes) override { pinned.emplace_back(p, bytes); }
  void unpin_host_memory(const void* p) override { unpinned.push_back(p); }

 protected:
  void copy_impl(const Tensor&, const Tensor&) override { ++impl_calls; }
  std::unique_ptr<Weight> load_weight_impl(std::span<const GgufTensor* const>, WeightMemory) override {
    ++impl_calls;
    return std::make_unique<Weight>();
  }
  void embed_impl(const Weight&, std::span<const int32_t>, const Tensor&, float) override { ++impl_calls; }
  void matmul_impl(const Tensor&, const Weight&, std::span<const Tensor>, std::span<const Weight* const>, Activations) override {
    ++impl_calls;
  }
  void rms_norm_impl(const Tensor&, const Weight&, float, const Tensor&) override { ++impl_calls; }
  void rope_impl(const Tensor&, std::span<const int32_t>, int, int, const RopeParams&, bool) override { ++impl_calls; }
  void layer_norm_impl(const Tensor&, const Weight&, const Weight&, float, const Tensor&) override { ++impl_calls; }
  void gelu_erf_impl(const Tensor&, const Tensor&) override { ++impl_calls; }
  void swiglu_impl(const Tensor&, const Tensor&, const Tensor&) override { ++impl_calls; }
  void geglu_impl(const Tensor&, const Tensor&, const Tensor&) override { ++impl_calls; }
  void add_impl(const Tensor&, const Tensor&) override { ++impl_calls; }
  void scatter_rows_impl(const Tensor&, const Tensor&, std::span<const int32_t>) override { ++impl_calls; }
  void gather_rows_impl(const Tensor&, const Tensor&, std::span<const int32_t>) override { ++impl_calls; }
  void row_sq_dist_impl(const Tensor&, const Tensor&, std::span<const int32_t>, const Tensor&) override {
    ++impl_calls;
  }
  void attention_impl(const Tensor&, std::span<const int32_t>, const Tensor&, const Tensor&, std::span<const int32_t>,
                      int64_t, const AttentionParams&, const Tensor&, SegmentMass*, NextProduct) override {
    ++impl_calls;
  }
};

}  // namespace ragkv::test
