// The CUDA backend: host side. Checks shapes and dtypes the way the CPU backend does, then calls
// the kernel launchers (rms-norm.cu, rope.cu, elementwise.cu) on the backend's stream.
//
// This file holds no device code, so it is compiled by the host compiler with the project's
// warnings (and fmt's compile-time format checks, which nvcc cannot compile).
//
// Link note: ragkv_core links ragkv_cuda, not the other way round, so this library uses only
// the inline parts of core/ headers (no dtype_size, Backend::alloc, GgufTensor::n_elements...);
// that keeps it free of link-order surprises.
#include "cuda/cuda-backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/gguf.h"
#include "cuda/cuda-check.h"
#include "cuda/elementwise.cuh"
#include "cuda/rms-norm.cuh"
#include "cuda/rope.cuh"

namespace ragkv {

namespace {

[[noreturn]] void not_implemented(const char* op) {
  fail("CUDA backend: op '{}' is not implemented yet", op);
}

size_t elem_size(DType t) { return t == DType::f32 ? 4 : 2; }
const char* type_str(DType t) { return t == DType::f32 ? "f32" : "f16"; }
size_t tensor_bytes(const Tensor& t) { return static_cast<size_t>(t.numel()) * elem_size(t.dtype); }

void check_f32(const Tensor& t, const char* op) {
  if (t.dtype != DType::f32) fail("internal: CUDA {} expects an f32 tensor, got {}", op, type_str(t.dtype));
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.rows != b.rows || a.cols != b.cols)
    fail("internal: CUDA {}: shapes [{}][{}] and [{}][{}] differ", op, a.rows, a.cols, b.rows, b.cols);
}

// A weight in device memory, f32 [out_features][in_features]; freed through its backend.
class CudaWeight : public Weight {
 public:
  CudaWeight(CudaBackend* owner, float* data) : owner_(owner), data_(data) {}
  ~CudaWeight() override {
    if (data_) owner_->raw_free(data_);
  }
  CudaWeight(const CudaWeight&) = delete;
  CudaWeight& operator=(const CudaWeight&) = delete;
  float* data() const { return data_; }

 private:
  CudaBackend* owner_;
  float* data_;  // device f32 [out_features][in_features]
};

// The weight as this backend loaded it; a weight of another backend fails loudly.
const CudaWeight& cuda_weight(const Weight& w, const char* op) {
  const auto* cw = dynamic_cast<const CudaWeight*>(&w);
  if (!cw) fail("internal: CUDA {}: weight '{}' was not loaded by the CUDA backend", op, w.name);
  return *cw;
}

}  // namespace

bool cuda_device_present() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for the caller
    return false;
  }
  return n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail("CUDA backend: no usable CUDA device ({}: {})", cudaGetErrorName(err), cudaGetErrorString(err));
  }
  if (device < 0 || device >= n)
    fail("CUDA backend: device {} does not exist ({} CUDA device(s) present)", device, n);
  return std::make_unique<CudaBackend>(device);
}

CudaBackend::CudaBackend(int device) : device_(device) {
  CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  name_ = fmt::format("cuda:{} ({})", device_, prop.name);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaBackend::~CudaBackend() {
  // Destructors must not throw: errors are reported to stderr.
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
  if (scratch_) CUDA_CHECK_NOTHROW(cudaFree(scratch_));
  CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
}

void CudaBackend::set_threads(int /*n*/) {
  // Host threads do not apply: the CUDA backend does all its work on the device.
}

// ---- memory

void* CudaBackend::raw_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail("{}: cannot allocate {} bytes of device memory ({})", name_, bytes, cudaGetErrorString(err));
  }
  return p;
}

void CudaBackend::raw_free(void* p) {
  // Called from destructors (Storage, CudaWeight), so it must not throw. Work queued on the
  // stream may still read p: wait for it before the memory goes back.
  if (!p) return;
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
  CUDA_CHECK_NOTHROW(cudaFree(p));
}

void CudaBackend::upload(const Tensor& dst, const void* host_src) {
  const size_t bytes = tensor_bytes(dst);
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // Complete before returning: host_src may be reused (or be pinned memory) as soon as we return.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::download(const Tensor& src, void* host_dst) {
  const size_t bytes = tensor_bytes(src);
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::fill_zero(const Tensor& t) {
  const size_t bytes = tensor_bytes(t);
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(t.data(), 0, bytes, stream_));
}

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

void* CudaBackend::scratch_upload(size_t bytes) {
  if (bytes > scratch_bytes_) {
    if (scratch_) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier ops may still read the old buffer
      CUDA_CHECK(cudaFree(scratch_));
      scratch_ = nullptr;
      scratch_bytes_ = 0;
    }
    const size_t grown = std::max<size_t>(bytes, 4096);
    scratch_ = raw_alloc(grown);
    scratch_bytes_ = grown;
  }
  // host_staging_ is pageable: the copy has been staged by the time cudaMemcpyAsync returns, so
  // the next op may refill host_staging_ at once; stream order protects scratch_ on the device.
  CUDA_CHECK(cudaMemcpyAsync(scratch_, host_staging_.data(), bytes, cudaMemcpyHostToDevice, stream_));
  return scratch_;
}

// ---- weights

std::unique_ptr<Weight> CudaBackend::load_weight(const GgufTensor& t) {
  int64_t n = t.ne.empty() ? 0 : 1;
  for (const int64_t d : t.ne) n *= d;
  const int64_t cols = t.ne.empty() ? 0 : t.ne[0];
  if (cols == 0 || n != cols)
    fail("CUDA backend: op 'load_weight' is not implemented yet for matrix '{}' (only vectors)", t.name);
  if (t.type != GgmlType::F32)
    fail("CUDA backend: op 'load_weight' is not implemented yet for vector '{}' of ggml type {} (only F32)",
         t.name, static_cast<uint32_t>(t.type));
  const size_t bytes = static_cast<size_t>(cols) * sizeof(float);
  if (t.data == nullptr || (t.nbytes != 0 && t.nbytes < bytes))
    fail("CUDA backend: tensor '{}' has no data for its {} f32 values", t.name, cols);

  auto w = std::make_unique<CudaWeight>(this, static_cast<float*>(raw_alloc(bytes)));
  w->name = t.name;
  w->out_features = 1;
  w->in_features = cols;
  CUDA_CHECK(cudaMemcpyAsync(w->data(), t.data, bytes, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return w;
}

// ---- ops

void CudaBackend::embed(const Weight&, std::span<const int32_t>, const Tensor&, float) {
  not_implemented("embed");
}

void CudaBackend::matmul(const Tensor&, const Weight&, const Tensor&, const Weight*) {
  not_implemented("matmul");
}

void CudaBackend::rms_norm(const Tensor& x, const Weight& w, float eps, const Tensor& y) {
  check_f32(x, "rms_norm");
  check_f32(y, "rms_norm");
  check_same_shape(x, y, "rms_norm");
  const CudaWeight& cw = cuda_weight(w, "rms_norm");
  if (w.in_features * w.out_features != x.cols)
    fail("internal: CUDA rms_norm weight {} has {} values for rows of {}", w.name,
         w.in_features * w.out_features, x.cols);
  if (x.rows > std::numeric_limits<int32_t>::max())
    fail("internal: CUDA rms_norm over {} rows exceeds the grid limit", x.rows);
  rms_norm_f32_cuda(x.as<float>(), cw.data(), y.as<float>(), x.rows, x.cols, eps, stream_);
}

void CudaBackend::rope(const Tensor& x, std::span<const int32_t> positions, int n_heads,
                       int head_dim, const RopeParams& p, bool inverse) {
  if (x.cols != int64_t(n_heads) * head_dim || int64_t(positions.size()) != x.rows)
    fail("internal: CUDA rope on [{}][{}] with {} heads of {} and {} positions", x.rows, x.cols,
         n_heads, head_dim, positions.size());
  if (p.n_rot < 0 || p.n_rot % 2 != 0 || p.n_rot > head_dim)
    fail("internal: CUDA rope rotates {} dimensions of heads of {} (expected an even count ≤ head_dim)",
         p.n_rot, head_dim);
  const int half = p.n_rot / 2;
  if (!p.freq_factors.empty() && int64_t(p.freq_factors.size()) < half)
    fail("internal: CUDA rope has {} frequency factors for {} rotated pairs", p.freq_factors.size(), half);
  if (half == 0 || x.rows == 0) return;

  // Staging layout: int32 positions [rows], then f32 inv_freq [half]. inv_freq comes from
  // rope_inv_freq(), shared with the CPU backend, so both rotate by the same float θ.
  const size_t pos_bytes = positions.size() * sizeof(int32_t);
  const size_t bytes = pos_bytes + size_t(half) * sizeof(float);
  host_staging_.resize(bytes);
  std::memcpy(host_staging_.data(), positions.data(), pos_bytes);
  float* inv_freq = reinterpret_cast<float*>(host_staging_.data() + pos_bytes);
  const std::vector<float> freqs = rope_inv_freq(p);
  std::memcpy(inv_freq, freqs.data(), freqs.size() * sizeof(float));
  auto* dev = static_cast<uint8_t*>(scratch_upload(bytes));
  const auto* d_pos = reinterpret_cast<const int32_t*>(dev);
  const auto* d_inv_freq = reinterpret_cast<const float*>(dev + pos_bytes);

  RopeShape s;
  s.rows = x.rows;
  s.n_heads = n_heads;
  s.head_dim = head_dim;
  s.n_rot = p.n_rot;
  s.freq_scale = p.freq_scale;
  s.neox = p.neox;
  s.inverse = inverse;
  if (x.dtype == DType::f16) rope_f16_cuda(x.as<__half>(), d_pos, d_inv_freq, s, stream_);
  else rope_f32_cuda(x.as<float>(), d_pos, d_inv_freq, s, stream_);
}

void CudaBackend::layer_norm(const Tensor&, const Weight&, const Weight&, float, const Tensor&) {
  not_implemented("layer_norm");
}

void CudaBackend::gelu_erf(const Tensor&, const Tensor&) { not_implemented("gelu_erf"); }

void CudaBackend::glu(const Tensor& gate, const Tensor& up, const Tensor& out, bool gelu) {
  const char* op = gelu ? "geglu" : "swiglu";
  check_f32(gate, op);
  check_f32(up, op);
  check_f32(out, op);
  check_same_shape(gate, up, op);
  check_same_shape(gate, out, op);
  if (gelu) geglu_f32_cuda(gate.as<float>(), up.as<float>(), out.as<float>(), gate.numel(), stream_);
  else swiglu_f32_cuda(gate.as<float>(), up.as<float>(), out.as<float>(), gate.numel(), stream_);
}

void CudaBackend::swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  glu(gate, up, out, false);
}

void CudaBackend::geglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  glu(gate, up, out, true);
}

void CudaBackend::add(const Tensor& a, const Tensor& b) {
  check_f32(a, "add");
  check_f32(b, "add");
  check_same_shape(a, b, "add");
  add_f32_cuda(a.as<float>(), b.as<float>(), a.numel(), stream_);
}

void CudaBackend::scatter_rows(const Tensor&, const Tensor&, std::span<const int32_t>) {
  not_implemented("scatter_rows");
}

void CudaBackend::gather_rows(const Tensor&, const Tensor&, std::span<const int32_t>) {
  not_implemented("gather_rows");
}

void CudaBackend::row_sq_dist(const Tensor&, const Tensor&, std::span<const int32_t>, const Tensor&) {
  not_implemented("row_sq_dist");
}

void CudaBackend::attention(const Tensor&, std::span<const int32_t>, const Tensor&, const Tensor&,
                            std::span<const int32_t>, int64_t, const AttentionParams&, const Tensor&,
                            SegmentMass*) {
  not_implemented("attention");
}

}  // namespace ragkv
