// The CUDA backend (DESIGN.md §3): device memory and the ops of core/backend.h on one CUDA
// device, every op queued on one stream the backend owns. The CPU backend is the reference each
// op is tested against (tests/test-cuda-ops.cpp).
//
// Implemented so far: memory, f32 vector weights (norm weights, biases), rms_norm, rope (f32 and
// f16), swiglu, geglu, add. Everything else (matrix weights, embed, matmul, layer_norm, gelu_erf,
// scatter_rows, gather_rows, attention) throws ragkv::Error "CUDA backend: op '...' is not implemented yet":
// a missing op fails loudly, never silently.
//
// One caller at a time (the backend keeps staging buffers), from a thread whose current CUDA
// device is this backend's (the constructor makes it current on the constructing thread).
// Tensors and weights must be freed before the backend that allocated them.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend.h"

namespace ragkv {

// True when the CUDA runtime sees at least one device. Never throws: false without a driver,
// without a device, or when the runtime fails to initialise.
bool cuda_device_present();

// The backend on CUDA device `device` (0-based). Throws ragkv::Error naming the device when it
// does not exist or cannot be initialised.
std::unique_ptr<Backend> make_cuda_backend(int device);

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }
  void set_threads(int n) override;

  // ---- memory. upload and download return when the copy is complete; fill_zero and the ops
  // are queued on the stream (synchronize() waits for them).
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* p) override;
  void upload(const Tensor& dst, const void* host_src) override;
  void download(const Tensor& src, void* host_dst) override;
  void fill_zero(const Tensor& t) override;
  void synchronize() override;

  // ---- weights: F32 vectors only (out_features == 1) for now.
  std::unique_ptr<Weight> load_weight(const GgufTensor& t) override;

  // ---- ops
  void embed(const Weight& table, std::span<const int32_t> ids, const Tensor& out,
             float scale) override;
  void matmul(const Tensor& x, const Weight& w, const Tensor& y, const Weight* bias) override;
  void rms_norm(const Tensor& x, const Weight& w, float eps, const Tensor& y) override;
  void rope(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
            const RopeParams& p, bool inverse) override;
  void layer_norm(const Tensor& x, const Weight& w, const Weight& b, float eps,
                  const Tensor& y) override;
  void gelu_erf(const Tensor& x, const Tensor& y) override;
  void swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void geglu(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void add(const Tensor& a, const Tensor& b) override;
  void scatter_rows(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows) override;
  void gather_rows(const Tensor& src, const Tensor& out, std::span<const int32_t> rows) override;
  void row_sq_dist(const Tensor& a, const Tensor& b, std::span<const int32_t> rows, const Tensor& out) override;
  void attention(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k, const Tensor& v,
                 std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                 const Tensor& out, SegmentMass* seg_mass) override;

  cudaStream_t stream() const { return stream_; }

 private:
  int device_ = 0;
  std::string name_;                // "cuda:0 (NVIDIA H100 80GB HBM3)"
  cudaStream_t stream_ = nullptr;   // every copy and kernel of this backend

  // Per-op parameters that live on the host (rope positions and frequencies) go to the device
  // through one grow-only scratch buffer, staged in host_staging_ and copied in one transfer.
  // Reuse across ops is safe because every use is ordered on stream_.
  void* scratch_ = nullptr;         // device bytes [scratch_bytes_]
  size_t scratch_bytes_ = 0;
  std::vector<uint8_t> host_staging_;
  void* scratch_upload(size_t bytes);  // copies host_staging_[0, bytes) to scratch_, returns it

  void glu(const Tensor& gate, const Tensor& up, const Tensor& out, bool gelu);
};

}  // namespace ragkv
