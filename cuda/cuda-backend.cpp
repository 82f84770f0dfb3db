// The CUDA backend: host side. The public ops of Backend (core/backend/backend-ops.cpp) have checked
// shapes, dtypes, indices and overlaps before any *_impl here runs; these add only the CUDA
// backend's own limits, then call cuBLAS and the kernel launchers
// (convert.cu, embed.cu, quant-matmul.cu, rows.cu, rms-norm.cu, layer-norm.cu, rope.cu,
// elementwise.cu) on the backend's stream. matmul lives in cuda-matmul.cpp, the step graphs
// (RAGKV_CUDA_GRAPHS) in cuda-step-graph.cpp.
//
// This file holds no device code, so it is compiled by the host compiler with the project's
// warnings (and fmt's compile-time format checks, which nvcc cannot compile).
//
// Layering: ragkv_cuda sits on ragkv_backend (the interface and its checks) and, below it,
// core/format/quant.h's dequantisation (ggml_row_bytes, dequantize_row); only cmd/ and the tests
// link it.
#include "cuda/cuda-backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <optional>
#include <string_view>

#include "core/util/error.h"
#include "core/format/fp16.h"
#include "core/format/gguf.h"
#include "core/format/quant.h"
#include "cuda/attention.cuh"
#include "cuda/attention-decode.cuh"
#include "cuda/attention-key-mass.cuh"
#include "cuda/attention-mma.cuh"
#include "cuda/attention-segment-mass.cuh"
#include "cuda/convert.cuh"
#include "cuda/cublas-loader.h"
#include "cuda/cuda-check.h"
#include "cuda/key-tile-bounds.h"
#include "cuda/cuda-weight.h"
#include "cuda/elementwise.cuh"
#include "cuda/embed.cuh"
#include "cuda/f16-product-bound.h"
#include "cuda/int8-gemv.cuh"
#include "cuda/layer-norm.cuh"
#include "cuda/quant-decode.cuh"
#include "cuda/quant-matmul.cuh"
#include "cuda/rms-norm.cuh"
#include "cuda/rope.cuh"
#include "cuda/rows.cuh"

namespace ragkv {

namespace {

constexpr float kF16Max = 65504.f;
// load_weight converts matrices in chunks of about this many values (16 MiB of f32 staging).
constexpr int64_t kLoadChunkValues = int64_t(1) << 22;

[[noreturn]] void f16_out_of_range(const GgufTensor& t, int64_t r, int64_t c, float v) {
  fail("CUDA backend: weight '{}' ({}) holds {} at [{}][{}]: the CUDA backend computes with weight "
       "matrices in f16, which holds finite values of magnitude ≤ 65504 only",
       t.name, ggml_type_name(t.type), v, r, c);
}

// Dequantises the rows of GGUF matrix t on the host (as the CPU backend does), a chunk of rows at
// a time, fails naming the element where f16 cannot hold a value, and hands each checked chunk
// to each(first_row, rows, values [rows][cols]). Returns the largest absolute row sum
// (f16-product-bound.h).
template <typename F>
double for_each_f16_checked_chunk(const GgufTensor& t, F&& each) {
  const int64_t cols = t.ne[0], rows = t.n_elements() / cols;
  const size_t row_bytes = ggml_row_bytes(t.type, cols);
  const int64_t chunk_rows = std::max<int64_t>(1, kLoadChunkValues / cols);
  std::vector<float> host(static_cast<size_t>(std::min(chunk_rows, rows) * cols));
  double max_row_l1 = 0;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t nr = std::min(chunk_rows, rows - r0);
    for (int64_t r = 0; r < nr; ++r)
      dequantize_row(t.type, t.data + static_cast<size_t>(r0 + r) * row_bytes, host.data() + r * cols, cols);
    for (int64_t i = 0; i < nr * cols; ++i)
      if (!(std::fabs(host[i]) <= kF16Max)) f16_out_of_range(t, r0 + i / cols, i % cols, host[i]);
    max_row_l1 = std::max(max_row_l1, max_row_abs_sum(host.data(), nr, cols));
    each(r0, nr, host.data());
  }
  return max_row_l1;
}

// The value of environment variable `name` when it is set and not empty; fails, naming the
// variable, its value and what it may be (`expected`), when it is none of `allowed`.
std::optional<std::string> env_choice(const char* name, std::initializer_list<std::string_view> allowed,
                                      std::string_view expected) {
  const char* value = std::getenv(name);
  if (!value || !*value) return std::nullopt;
  const std::string v = value;
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) fail("{}={}: expected {}", name, v, expected);
  return v;
}

// The f16 operand's bytes in operand_f16_ (256-byte aligned: its row unscales follow).
size_t f16_operand_xh_bytes(int64_t rows, int64_t cols) {
  return (size_t(rows * cols) * sizeof(__half) + 255) / 256 * 256;
}

// A row sum for CudaWeight::max_row_l1: never below the double it comes from.
float row_sum_bound(double sum) {
  const float f = static_cast<float>(sum);
  return double(f) < sum ? std::nextafter(f, std::numeric_limits<float>::infinity()) : f;
}

// The profile's label of each attention route (op-profile.h).
const char* attention_profile_name(AttentionRoute r) {
  switch (r) {
    case AttentionRoute::split_k: return "attention/split-k";
    case AttentionRoute::mma: return "attention/mma";
    case AttentionRoute::mma_key_mass: return "attention/mma+key-mass";
    case AttentionRoute::mma_segment_mass: return "attention/mma+segment-mass";
    case AttentionRoute::f32: return "attention/f32";
    case AttentionRoute::f32_mass: return "attention/f32+mass";
  }
  return "attention";
}

}  // namespace

std::optional<std::vector<int32_t>> surviving_writes(std::span<const int32_t> rows) {
  bool ascending = true;
  for (size_t i = 1; i < rows.size() && ascending; ++i) ascending = rows[i - 1] < rows[i];
  if (ascending) return std::nullopt;
  std::vector<int32_t> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return rows[a] < rows[b]; });
  bool repeats = false;
  for (size_t k = 1; k < order.size() && !repeats; ++k) repeats = rows[order[k - 1]] == rows[order[k]];
  if (!repeats) return std::nullopt;
  std::vector<int32_t> keep;
  for (size_t k = 0; k < order.size(); ++k)
    if (k + 1 == order.size() || rows[order[k + 1]] != rows[order[k]]) keep.push_back(order[k]);
  return keep;
}

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

std::string CudaBackend::kernels() const {
  return name_ + (!keep_quantised_ ? "+f16-weights" : f16_prefill_copy_ ? "+quant+f16-weights" : "+quant-weights") +
         (attention_mma_enabled() ? "+mma-attention" : "+f32-attention") +
         (keep_quantised_ && !int8_decode_ ? "+f32-decode-acts" : "") + (f16_ffn_products_ ? "" : "+f32-ffn-products") +
         (fused_gemv_stores_ ? "" : "+separate-gemv-stores") +
         (op_by_op_steps_ ? "+op-by-op-steps" : "");
}

CudaBackend::CudaBackend(int device) : device_(device) {
  if (const auto v = env_choice("RAGKV_CUDA_WEIGHTS", {"quant", "f16", "quant+f16"},
                                "'quant' (quantised matrices stay quantised on the device, the default), 'f16' "
                                "(converted to f16 at load) or 'quant+f16' (kept quantised for decode steps, plus an "
                                "f16 copy for prefill products: 2 bytes more per weight)")) {
    keep_quantised_ = *v != "f16";
    f16_prefill_copy_ = *v == "quant+f16";
  }
  if (const auto v = env_choice("RAGKV_CUDA_GRAPHS", {"0", "1"},
                                "1 (decode steps launched as CUDA graphs, the default) or 0 (op by op)")) {
    graphs_ = *v == "1";
    report_step_graphs_ = true;
  }
  op_by_op_steps_ = !graphs_;
  if (const auto v = env_choice("RAGKV_CUDA_DECODE_ACTS", {"int8", "f32"},
                                "'int8' (decode steps on quantised weights meet 8-bit activation blocks in integer dot "
                                "products, as on the CPU; the default) or 'f32' (f32 activations times the decoded "
                                "weights)"))
    int8_decode_ = *v == "int8";
  if (const auto v = env_choice("RAGKV_CUDA_FFN_PRODUCTS", {"f16", "f32"},
                                "'f16' (a prefill FFN's gate and up products written in f16 where the weight bounds "
                                "them, the default) or 'f32'"))
    f16_ffn_products_ = *v == "f16";
  if (const auto v = env_choice("RAGKV_CUDA_GEMV_STORES", {"fused", "separate"},
                                "'fused' (a decode step's GEMVs store the next op's work: Q and K rotated with the "
                                "new K and V rows in the cache, the GLU quantised for the down product; the "
                                "default) or 'separate' (those ops in launches of their own)"))
    fused_gemv_stores_ = *v == "fused";
  (void)env_choice("RAGKV_CUDA_ATTENTION", {"mma", "f32"},
                   "'mma' (tensor-core attention where it applies, the default) or 'f32' (the f32 kernel everywhere)");
  CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  name_ = fmt::format("cuda:{} ({})", device_, prop.name);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    CUBLAS_CHECK(cublas::api().create(&cublas_));
    CUBLAS_CHECK(cublas::api().set_stream(cublas_, stream_));
    // A workspace of the size the cuBLAS API reference recommends (cublasSetWorkspace: 32 MiB on
    // Hopper, 4 MiB before), given rather than left to cuBLAS, so that its GEMM kernels that need
    // one are open to it and a GEMM inside a captured step allocates nothing.
    const size_t workspace_bytes = size_t(prop.major >= 9 ? 32 : 4) << 20;
    CUDA_CHECK(cudaMalloc(&cublas_workspace_, workspace_bytes));
    CUBLAS_CHECK(cublas::api().set_workspace(cublas_, cublas_workspace_, workspace_bytes));
    // Split-K reductions in f32 even where a GEMM writes f16 (the FFN's products): its only
    // rounding to f16 is the last one (cuda/f16-product-bound.h, tests/ffn-f16-products-bound.h).
    CUBLAS_CHECK(cublas::api().set_math_mode(
        cublas_, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    // Split-K's counters (AttentionArgs::decode_done), one per KV head a call may have, then the
    // decode GLU's (glu_done): zeroed here, outside any step graph, and left zero by every call.
    const size_t counter_bytes = (kDecodeDoneCounters + kGluDoneCounters) * sizeof(unsigned);
    CUDA_CHECK(cudaMalloc(&decode_done_, counter_bytes));
    CUDA_CHECK(cudaMemsetAsync(decode_done_, 0, counter_bytes, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // (the legacy stream's cudaMemset is not ordered with stream_)
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&uploads_done_, cudaEventDisableTiming));
    if (const char* path = std::getenv("RAGKV_CUDA_PROFILE"); path && *path) {
      profiler_ = std::make_unique<CudaOpProfiler>(path, stream_);
      graphs_ = false;  // the profile times ops one by one
      op_by_op_steps_ = true;
    }
  } catch (...) {
    // The destructor does not run for a constructor that throws.
    if (uploads_done_) CUDA_CHECK_NOTHROW(cudaEventDestroy(uploads_done_));
    if (compute_mark_) CUDA_CHECK_NOTHROW(cudaEventDestroy(compute_mark_));
    if (copy_stream_) CUDA_CHECK_NOTHROW(cudaStreamDestroy(copy_stream_));
    if (cublas_) (void)cublas::api().destroy(cublas_);
    if (cublas_workspace_) CUDA_CHECK_NOTHROW(cudaFree(cublas_workspace_));
    if (decode_done_) CUDA_CHECK_NOTHROW(cudaFree(decode_done_));
    CUDA_CHECK_NOTHROW(cudaStreamDestroy(stream_));
    throw;
  }
}

CudaBackend::~CudaBackend() {
  // Destructors must not throw: errors are reported to stderr.
  // How the step graphs went, where RAGKV_CUDA_GRAPHS was set (the GPU script's logs).
  if (const std::string steps = step_summary(); report_step_graphs_ && !steps.empty())
    std::fprintf(stderr, "ragkv: %s: decode steps as CUDA graphs: %s\n", name_.c_str(), steps.c_str());
  if (profiler_) {
    try {
      profiler_->write(name_, kernels());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ragkv: the CUDA profile (RAGKV_CUDA_PROFILE) was not written: %s\n", e.what());
    }
    profiler_.reset();
  }
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(copy_stream_));
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
  for (const auto& [p, bytes] : registered_) CUDA_CHECK_NOTHROW(cudaHostUnregister(const_cast<uint8_t*>(p)));
  for (PinnedSlot& slot : slots_) {
    CUDA_CHECK_NOTHROW(cudaEventDestroy(slot.copied));
    CUDA_CHECK_NOTHROW(cudaFreeHost(slot.host));
  }
  CUDA_CHECK_NOTHROW(cudaEventDestroy(uploads_done_));
  CUDA_CHECK_NOTHROW(cudaEventDestroy(compute_mark_));
  CUDA_CHECK_NOTHROW(cudaStreamDestroy(copy_stream_));
  if (const cublasStatus_t st = cublas::api().destroy(cublas_); st != CUBLAS_STATUS_SUCCESS)
    std::fprintf(stderr, "ragkv: cuBLAS error %s destroying the handle of %s\n", cublas::api().status_name(st),
                 name_.c_str());
  if (cublas_workspace_) CUDA_CHECK_NOTHROW(cudaFree(cublas_workspace_));
  if (step_exec_) CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(step_exec_));
  if (capture_host_) CUDA_CHECK_NOTHROW(cudaFreeHost(capture_host_));
  if (upload_ring_) CUDA_CHECK_NOTHROW(cudaFreeHost(upload_ring_));
  for (void* ring : retired_rings_) CUDA_CHECK_NOTHROW(cudaFreeHost(ring));
  free_deferred();
  if (scratch_) CUDA_CHECK_NOTHROW(cudaFree(scratch_));
  for (const RepeatedUpload* u : repeated_uploads())
    if (u->device) CUDA_CHECK_NOTHROW(cudaFree(u->device));
  if (work_) CUDA_CHECK_NOTHROW(cudaFree(work_));
  if (operand_q8_) CUDA_CHECK_NOTHROW(cudaFree(operand_q8_));
  if (operand_f16_) CUDA_CHECK_NOTHROW(cudaFree(operand_f16_));
  if (decode_done_) CUDA_CHECK_NOTHROW(cudaFree(decode_done_));
  for (const PendingMass& m : mass_buffers_)
    if (m.device) CUDA_CHECK_NOTHROW(cudaFree(m.device));
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
  if (capturing_) {  // a stream being captured cannot be waited for: freed after the step ran
    deferred_free_.push_back(p);
    return;
  }
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(copy_stream_));
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
  CUDA_CHECK_NOTHROW(cudaFree(p));
}

void CudaBackend::upload(const Tensor& dst, const void* host_src) {
  untracked_write("an upload");
  const size_t bytes = dst.bytes();
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), host_src, bytes, cudaMemcpyHostToDevice, stream_));
  // Complete before returning: host_src may be reused (or be pinned memory) as soon as we return.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaBackend::PinnedSlot& CudaBackend::free_slot(size_t bytes) {
  // A slot whose copy has completed and that is large enough; else grow one that is free; else a
  // new one. Slots in flight are never touched, so their host bytes stay valid for the DMA.
  PinnedSlot* idle = nullptr;
  for (PinnedSlot& slot : slots_) {
    const cudaError_t q = cudaEventQuery(slot.copied);
    if (q == cudaErrorNotReady) continue;
    CUDA_CHECK(q);
    if (slot.bytes >= bytes) return slot;
    if (!idle) idle = &slot;
  }
  if (!idle) {
    slots_.emplace_back();
    idle = &slots_.back();
    CUDA_CHECK(cudaEventCreateWithFlags(&idle->copied, cudaEventDisableTiming));
  }
  if (idle->host) CUDA_CHECK(cudaFreeHost(idle->host));
  idle->host = nullptr;
  idle->bytes = 0;
  const size_t grown = std::max<size_t>(bytes, size_t(1) << 20);
  const cudaError_t err = cudaMallocHost(&idle->host, grown);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    fail("{}: cannot allocate {} bytes of pinned host memory for KV loading ({})", name_, grown,
         cudaGetErrorString(err));
  }
  idle->bytes = grown;
  return *idle;
}

void CudaBackend::upload_async(const Tensor& dst, const void* host_src) {
  untracked_write("a layer-wise upload");
  const size_t bytes = dst.bytes();
  if (bytes == 0) return;
  if (!batch_open_) {
    // The rows may still be read by compute queued earlier (e.g. the previous prompt's attention).
    CUDA_CHECK(cudaEventRecord(compute_mark_, stream_));
    CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_mark_, 0));
    batch_open_ = true;
  }
  if (registered_range(host_src, bytes)) {  // pinned by the caller: DMA straight from it
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), host_src, bytes, cudaMemcpyHostToDevice, copy_stream_));
    return;
  }
  PinnedSlot& slot = free_slot(bytes);
  std::memcpy(slot.host, host_src, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), slot.host, bytes, cudaMemcpyHostToDevice, copy_stream_));
  CUDA_CHECK(cudaEventRecord(slot.copied, copy_stream_));
}

bool CudaBackend::registered_range(const void* p, size_t bytes) const {
  const auto* b = static_cast<const uint8_t*>(p);
  auto it = registered_.upper_bound(b);  // the first range starting after p
  if (it == registered_.begin()) return false;
  --it;
  return b + bytes <= it->first + it->second;
}

void CudaBackend::pin_host_memory(const void* p, size_t bytes) {
  if (!p || bytes == 0 || registered_.count(static_cast<const uint8_t*>(p))) return;
  // cudaHostRegister takes a non-const pointer but only pins the pages; the bytes are not written.
  const cudaError_t err = cudaHostRegister(const_cast<void*>(p), bytes, cudaHostRegisterDefault);
  if (err != cudaSuccess) {  // a hint only (backend.h): uploads from it stay staged
    (void)cudaGetLastError();
    return;
  }
  registered_[static_cast<const uint8_t*>(p)] = bytes;
}

void CudaBackend::unpin_host_memory(const void* p) {
  const auto it = registered_.find(static_cast<const uint8_t*>(p));
  if (it == registered_.end()) return;
  // Called from destructors: must not throw. Copies queued from the range must finish first.
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(copy_stream_));
  CUDA_CHECK_NOTHROW(cudaHostUnregister(const_cast<void*>(p)));
  registered_.erase(it);
}

void CudaBackend::wait_uploads() {
  no_replay("a wait for uploads");
  if (!batch_open_) return;
  CUDA_CHECK(cudaEventRecord(uploads_done_, copy_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, uploads_done_, 0));
  batch_open_ = false;
}

void CudaBackend::download(const Tensor& src, void* host_dst) {
  no_replay("a download");
  const size_t bytes = src.bytes();
  if (bytes == 0) return;
  const auto timed = profile("download", src.rows);
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src.data(), bytes, cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  stream_synced();
}

void CudaBackend::fill_zero(const Tensor& t) {
  untracked_write("fill_zero");
  const size_t bytes = t.bytes();
  if (bytes == 0) return;
  const auto timed = profile("fill_zero", t.rows);
  CUDA_CHECK(cudaMemsetAsync(t.data(), 0, bytes, stream_));
}

void CudaBackend::copy_impl(const Tensor& src, const Tensor& dst) {
  untracked_write("a copy");
  if (src.bytes() == 0) return;
  const auto timed = profile("copy", src.rows);
  CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::synchronize() {
  no_replay("a sync");
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (capturing_) return;
  stream_synced();
  free_deferred();
  copy_back_pending_mass();
}

// A device buffer for one deferred call's key totals; the buffers of calls already copied back
// are reused (no kernel reads them any more: synchronize() waited for the stream).
float* CudaBackend::pending_mass_buffer(std::vector<float>* out, size_t floats) {
  if (mass_pending_ == mass_buffers_.size()) mass_buffers_.emplace_back();
  PendingMass& m = mass_buffers_[mass_pending_++];
  grow_device_buffer(m.device, m.capacity, floats * sizeof(float));
  m.out = out;
  return static_cast<float*>(m.device);
}

void CudaBackend::copy_back_pending_mass() {
  const size_t pending = mass_pending_;
  mass_pending_ = 0;  // first: after a failed copy, none is retried into a vector gone since
  for (size_t i = 0; i < pending; ++i) {
    const PendingMass& m = mass_buffers_[i];
    CUDA_CHECK(cudaMemcpyAsync(m.out->data(), m.device, m.out->size() * sizeof(float), cudaMemcpyDeviceToHost,
                               stream_));
  }
  if (pending > 0) CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::grow_device_buffer(void*& buffer, size_t& capacity, size_t bytes, bool geometric) {
  if (bytes <= capacity) return;
  no_replay("a buffer that must grow");
  const size_t grown = std::max({bytes, size_t(4096), geometric ? capacity + capacity / 2 : size_t(0)});
  if (buffer) {
    if (capturing_) {
      deferred_free_.push_back(buffer);  // the captured ops before this one still read it
    } else {
      CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier ops may still use the old buffer
      CUDA_CHECK(cudaFree(buffer));
    }
    buffer = nullptr;
    capacity = 0;
  }
  buffer = raw_alloc(grown);
  capacity = grown;
}

void* CudaBackend::scratch_upload(size_t bytes) {
  grow_device_buffer(scratch_, scratch_bytes_, bytes, /*geometric=*/true);
  (void)step_op(StepOp::upload, {bytes, step_key(scratch_)});
  // The copy reads host_staging_'s bytes from the upload ring (or, pageable, has staged them by
  // the time cudaMemcpyAsync returns), so the next op may refill host_staging_ at once; stream
  // order protects scratch_ on the device.
  const void* src = staged_source(bytes);
  if (src && !replaying_) CUDA_CHECK(cudaMemcpyAsync(scratch_, src, bytes, cudaMemcpyHostToDevice, stream_));
  return scratch_;
}

const void* CudaBackend::upload_if_changed(RepeatedUpload& u) {
  if (host_staging_.empty()) return nullptr;
  const bool same = host_staging_ == u.host;  // every layer after the first
  (void)step_op(StepOp::repeated_upload, {step_key(&u), same, host_staging_.size()});
  if (same) return u.device;
  grow_device_buffer(u.device, u.capacity, host_staging_.size(), /*geometric=*/true);
  // From the upload ring (or pageable, staged by the time the call returns); the copy is ordered
  // on stream_ after the kernels that read the previous contents. (Replayed: the recorded graph's
  // copy reads the bytes staged here.)
  const void* src = staged_source(host_staging_.size());
  if (!src) return u.device;  // a failed capture: u.host stays as it was
  if (!replaying_)
    CUDA_CHECK(cudaMemcpyAsync(u.device, src, host_staging_.size(), cudaMemcpyHostToDevice, stream_));
  u.host = host_staging_;
  return u.device;
}

int CudaBackend::operand_block_for(NextProduct next, int64_t rows, int64_t cols) {
  if (!next.weight) return 0;
  const int block = int8_operand_block(cuda_weight(*next.weight), *next.weight, rows, next.act);
  if (block == 0 || cols % block != 0) return 0;
  // Room for the most rows a decode product takes: the buffer does not grow step by step.
  grow_device_buffer(operand_q8_, operand_q8_bytes_, act_q8_bytes(block, kQuantGemvMaxRows, cols));
  return block;
}

quant_dot::ActQ8Out CudaBackend::prepare_operand(const Tensor& out, const Weight* weight, int block) {
  const quant_dot::ActQ8Out q8 = act_q8_outputs(block, out.rows, out.cols, operand_q8_);
  prepared_ = {out.data(), out.rows, out.cols, weight, block, act_q8_view(q8, out.cols)};
  return q8;
}

std::optional<int> CudaBackend::f16_operand_for(NextProduct next, int64_t rows, int64_t cols) {
  // matmul_gemm's rows (more than a GEMV's) on a weight it multiplies in f16 (f16, or quantised and
  // dequantised in tiles); glu_ffn's gate/up scaled for its f16 products, as glu_ffn_impl does.
  if (!next.weight || rows <= kQuantGemvMaxRows) return std::nullopt;
  const CudaWeight& cw = cuda_weight(*next.weight);
  if (!cw.quantised() && cw.dtype() != DType::f16) return std::nullopt;
  const int top = next.gated && f16_ffn_products_ ? f16_product_top(cw.max_row_l1()) : -1;
  grow_device_buffer(operand_f16_, operand_f16_bytes_,
                     f16_operand_xh_bytes(rows, cols) + (size_t(rows) * sizeof(float) + 255) / 256 * 256,
                     /*geometric=*/true);
  return top;
}

const CudaBackend::PreparedOperand& CudaBackend::prepare_f16_operand(const Tensor& out, const Weight* weight, int top) {
  auto* base = static_cast<uint8_t*>(operand_f16_);
  prepared_ = {};
  prepared_.data = out.data();
  prepared_.rows = out.rows;
  prepared_.cols = out.cols;
  prepared_.weight = weight;
  prepared_.f16 = true;
  prepared_.top = top;
  prepared_.xh = reinterpret_cast<__half*>(base);
  prepared_.unscale = reinterpret_cast<float*>(base + f16_operand_xh_bytes(out.rows, out.cols));
  return prepared_;
}

void CudaBackend::untracked_write(const char* what) {
  no_replay(what);
  prepared_ = {};  // the memory written may be the prepared operand's
}

void* CudaBackend::work_reserve(size_t bytes) {
  grow_device_buffer(work_, work_bytes_, bytes);
  return work_;
}

void CudaBackend::check_grid_rows(int64_t rows, const char* op) const {
  if (rows > std::numeric_limits<int32_t>::max())
    fail("internal: CUDA {} over {} rows exceeds the grid limit", op, rows);
}

bool CudaBackend::supports(BackendOp op, DType dtype) const {
  // Every op, with every dtype the interface defines (the header comment lists them).
  return backend_op_defined(op, dtype);
}

// ---- weights

// Backend::load_weight(_stack) has checked the types, that there are values, that the data covers
// them and that the parts share in_features. The file's bytes are always copied to the device
// (WeightMemory does not matter here).
std::unique_ptr<Weight> CudaBackend::load_weight_impl(std::span<const GgufTensor* const> parts, WeightMemory mem) {
  const int64_t cols = parts[0]->ne[0];
  int64_t rows = 0;
  for (const GgufTensor* t : parts) rows += t->rows();

  if (parts.size() == 1 && rows == 1) {  // a vector: f32, dequantised on the host
    const GgufTensor& t = *parts[0];
    std::vector<float> host(static_cast<size_t>(cols));
    dequantize_row(t.type, t.data, host.data(), cols);
    auto w = std::make_unique<CudaWeight>(this, raw_alloc(host.size() * sizeof(float)), DType::f32);
    w->name = t.name;
    w->out_features = 1;
    w->in_features = cols;
    CUDA_CHECK(cudaMemcpyAsync(w->f32(), host.data(), host.size() * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // host is freed on return
    return w;
  }

  // A matrix (or a stack of them) of types the device decodes: kept quantised (cuda-backend.h).
  const bool decodable = std::all_of(parts.begin(), parts.end(),
                                     [](const GgufTensor* t) { return quant_decode::device_decodable(t->type); });
  if (keep_quantised_ && decodable) return load_quantised(parts, rows, cols, mem);

  // Any other matrix (or a stack of them, part after part): f16 [rows][cols] (why f16: cuda-backend.h).
  // Made before the conversion so that a failure part-way frees the device memory.
  auto w = std::make_unique<CudaWeight>(this, raw_alloc(static_cast<size_t>(rows * cols) * sizeof(__half)),
                                        DType::f16);
  w->name = parts[0]->name;
  w->out_features = rows;
  w->in_features = cols;
  int64_t first = 0;
  double max_row_l1 = 0;
  for (const GgufTensor* t : parts) {
    max_row_l1 = std::max(max_row_l1, upload_f16_rows(*t, w->f16() + first * cols));
    first += t->rows();
  }
  w->set_max_row_l1(row_sum_bound(max_row_l1));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return w;
}

// One GGUF matrix into f16 rows at dst (device), checking that f16 holds every value; returns
// its largest absolute row sum.
double CudaBackend::upload_f16_rows(const GgufTensor& t, __half* dst) {
  const int64_t n = t.n_elements();
  const int64_t cols = t.ne[0];
  if (t.type == GgmlType::F16) {
    // Already f16: copied as it is, after checking that no value is inf or NaN (exponent bits
    // all ones). The data may be unaligned: a chunk of rows at a time is copied into aligned
    // halves (the file's little-endian order is the host's), checked, and widened (vectorised)
    // for the row sums.
    double max_row_l1 = 0;
    const int64_t rows = n / cols, chunk_rows = std::max<int64_t>(1, kLoadChunkValues / cols);
    std::vector<f16_t> halves(static_cast<size_t>(std::min(chunk_rows, rows) * cols));
    std::vector<float> values(halves.size());
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0), nv = nr * cols;
      std::memcpy(halves.data(), t.data + static_cast<size_t>(r0 * cols) * 2, static_cast<size_t>(nv) * 2);
      for (int64_t i = 0; i < nv; ++i)
        if ((halves[size_t(i)] & 0x7c00u) == 0x7c00u)
          f16_out_of_range(t, r0 + i / cols, i % cols, fp16_to_fp32(halves[size_t(i)]));
      fp16_to_fp32_row(halves.data(), values.data(), nv);
      max_row_l1 = std::max(max_row_l1, max_row_abs_sum(values.data(), nr, cols));
    }
    CUDA_CHECK(cudaMemcpyAsync(dst, t.data, static_cast<size_t>(n) * sizeof(__half), cudaMemcpyHostToDevice,
                               stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // t.data may be unmapped after the load
    return max_row_l1;
  }

  // Every other type: each checked chunk of f32 rows is copied to the work buffer and rounded to
  // f16 there. The pageable copy is staged by the time cudaMemcpyAsync returns, so the host
  // buffer is refilled at once while the device converts; the work buffer is reused in stream order.
  float* staged = nullptr;
  const double max_row_l1 = for_each_f16_checked_chunk(t, [&](int64_t r0, int64_t nr, const float* host) {
    if (!staged) staged = static_cast<float*>(work_reserve(static_cast<size_t>(nr * cols) * sizeof(float)));
    CUDA_CHECK(cudaMemcpyAsync(staged, host, static_cast<size_t>(nr * cols) * sizeof(float),
                               cudaMemcpyHostToDevice, stream_));
    convert_f32_to_f16_cuda(staged, dst + r0 * cols, nr * cols, stream_);
  });
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the work buffer is reused by the next part
  return max_row_l1;
}

// A matrix kept in its quantised blocks: each part's bytes copied as they are, after the same
// range check as an f16 matrix (matmul's prefill tiles round these values to f16).
std::unique_ptr<Weight> CudaBackend::load_quantised(std::span<const GgufTensor* const> parts, int64_t rows,
                                                    int64_t cols, WeightMemory mem) {
  auto w = std::make_unique<CudaWeight>(this);
  w->name = parts[0]->name;
  w->out_features = rows;
  w->in_features = cols;
  double max_row_l1 = 0;
  for (const GgufTensor* t : parts) {
    max_row_l1 = std::max(max_row_l1, for_each_f16_checked_chunk(*t, [](int64_t, int64_t, const float*) {}));
    const size_t bytes = ggml_row_bytes(t->type, cols) * static_cast<size_t>(t->rows());
    auto* data = static_cast<uint8_t*>(raw_alloc(bytes));
    w->add_part({data, t->type, t->rows()});  // owned by w from here
    CUDA_CHECK(cudaMemcpyAsync(data, t->data, bytes, cudaMemcpyHostToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // t->data may be unmapped after the load
  }
  w->set_max_row_l1(row_sum_bound(max_row_l1));
  // The values an f16 matrix would hold, decoded on the device, for matrices that meet products
  // (kernel_layout): not for an embedding table, whose rows embed decodes from the blocks.
  if (f16_prefill_copy_ && mem == WeightMemory::kernel_layout) {
    auto* copy = static_cast<__half*>(raw_alloc(static_cast<size_t>(rows * cols) * sizeof(__half)));
    w->set_f16_copy(copy);  // owned by w from here
    int64_t first = 0;
    for (const QuantPart& p : w->parts()) {
      dequantize_to_f16_cuda(p.type, p.data, p.rows, cols, copy + first * cols, stream_);
      first += p.rows;
    }
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return w;
}

// ---- ops (arguments checked by Backend; see core/backend/backend-ops.cpp)

void CudaBackend::embed_impl(const Weight& table, std::span<const int32_t> ids, const Tensor& out, float scale) {
  const CudaWeight& cw = cuda_weight(table);
  const int64_t n = static_cast<int64_t>(ids.size());
  if (n == 0) return;
  check_grid_rows(n, "embed");
  const bool replay = step_op(StepOp::embed, {step_key(table), step_key(out), step_key(scale)});
  const auto timed = profile("embed", n);

  host_staging_.resize(ids.size_bytes());
  std::memcpy(host_staging_.data(), ids.data(), ids.size_bytes());
  const auto* d_ids = static_cast<const int32_t*>(scratch_upload(ids.size_bytes()));
  if (replay) return;
  if (cw.quantised()) {
    if (cw.parts().size() != 1) fail("internal: CUDA embed: table {} is a stack of {} parts", cw.name, cw.parts().size());
    embed_quant_cuda(cw.parts()[0].type, cw.parts()[0].data, out.cols, d_ids, n, out.as<float>(), scale, stream_);
  } else if (cw.dtype() == DType::f16) embed_f16_cuda(cw.f16(), d_ids, out.as<float>(), n, out.cols, scale, stream_);
  else embed_f32_cuda(cw.f32(), d_ids, out.as<float>(), n, out.cols, scale, stream_);
}

void CudaBackend::rms_norm_impl(const Tensor& x, const Weight& w, float eps, const Tensor& y) {
  const CudaWeight& cw = cuda_vector(w, "rms_norm");
  check_grid_rows(x.rows, "rms_norm");
  if (step_op(StepOp::rms_norm, {step_key(x), step_key(w), step_key(eps), step_key(y)})) return;
  const auto timed = profile("rms_norm", x.rows);
  rms_norm_f32_cuda(x.as<float>(), cw.f32(), y.as<float>(), x.rows, x.cols, eps, stream_);
}

// Positions and inverse frequencies on the device (rope_params_), and the launch geometry.
CudaBackend::RopeLaunch CudaBackend::rope_launch(std::span<const int32_t> positions, int64_t rows, int n_heads,
                                                int head_dim, const RopeParams& p, bool inverse) {
  const int half = p.n_rot / 2;
  // Staging layout: int32 positions [rows], then f32 inv_freq [half]. inv_freq comes from
  // rope_inv_freq(), shared with the CPU backend, so both rotate by the same float θ.
  const size_t pos_bytes = positions.size() * sizeof(int32_t);
  const size_t bytes = pos_bytes + size_t(half) * sizeof(float);
  host_staging_.resize(bytes);
  std::memcpy(host_staging_.data(), positions.data(), pos_bytes);
  float* inv_freq = reinterpret_cast<float*>(host_staging_.data() + pos_bytes);
  const std::vector<float> freqs = rope_inv_freq(p);
  std::memcpy(inv_freq, freqs.data(), freqs.size() * sizeof(float));
  const auto* dev = static_cast<const uint8_t*>(upload_if_changed(rope_params_));
  RopeLaunch r;
  r.positions = reinterpret_cast<const int32_t*>(dev);
  r.inv_freq = reinterpret_cast<const float*>(dev + pos_bytes);
  r.shape.rows = rows;
  r.shape.n_heads = n_heads;
  r.shape.head_dim = head_dim;
  r.shape.n_rot = p.n_rot;
  r.shape.freq_scale = p.freq_scale;
  r.shape.neox = p.neox;
  r.shape.inverse = inverse;
  return r;
}

void CudaBackend::rope_impl(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
                            const RopeParams& p, bool inverse) {
  if (p.n_rot / 2 == 0 || x.rows == 0) return;
  const bool replay = step_op(StepOp::rope, {step_key(x), uint64_t(n_heads), uint64_t(head_dim), inverse,
                               uint64_t(p.n_rot), step_key(p.freq_scale), p.neox});
  const auto timed = profile("rope", x.rows);
  const RopeLaunch r = rope_launch(positions, x.rows, n_heads, head_dim, p, inverse);
  if (replay) return;
  if (x.dtype == DType::f16) rope_f16_cuda(x.as<__half>(), r.positions, r.inv_freq, r.shape, stream_);
  else rope_f32_cuda(x.as<float>(), r.positions, r.inv_freq, r.shape, stream_);
}

void CudaBackend::rope_qk_impl(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head,
                               int n_head_kv, int head_dim, const RopeParams& p) {
  if (p.n_rot / 2 == 0 || q.rows == 0) return;
  const bool replay = step_op(StepOp::rope_qk, {step_key(q), step_key(k), uint64_t(n_head),
                               uint64_t(n_head_kv), uint64_t(head_dim), uint64_t(p.n_rot), step_key(p.freq_scale),
                               p.neox});
  const auto timed = profile("rope_qk", q.rows);
  const RopeLaunch r = rope_launch(positions, q.rows, n_head, head_dim, p, /*inverse=*/false);
  if (replay) return;
  if (q.dtype == DType::f16)
    rope_qk_f16_cuda(q.as<__half>(), k.as<__half>(), n_head_kv, r.positions, r.inv_freq, r.shape, stream_);
  else
    rope_qk_f32_cuda(q.as<float>(), k.as<float>(), n_head_kv, r.positions, r.inv_freq, r.shape, stream_);
}

void CudaBackend::layer_norm_impl(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& y) {
  const CudaWeight& cw = cuda_vector(w, "layer_norm");
  const CudaWeight& cb = cuda_vector(b, "layer_norm");
  check_grid_rows(x.rows, "layer_norm");
  if (step_op(StepOp::layer_norm, {step_key(x), step_key(w), step_key(b), step_key(eps), step_key(y)}))
    return;
  const auto timed = profile("layer_norm", x.rows);
  layer_norm_f32_cuda(x.as<float>(), cw.f32(), cb.f32(), y.as<float>(), x.rows, x.cols, eps, stream_);
}

void CudaBackend::gelu_erf_impl(const Tensor& x, const Tensor& y) {
  if (step_op(StepOp::gelu_erf, {step_key(x), step_key(y)})) return;
  const auto timed = profile("gelu_erf", x.rows);
  gelu_erf_f32_cuda(x.as<float>(), y.as<float>(), x.numel(), stream_);
}

void CudaBackend::swiglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (step_op(StepOp::swiglu, {step_key(gate), step_key(up), step_key(out)})) return;
  const auto timed = profile("swiglu", gate.rows);
  swiglu_f32_cuda(gate.as<float>(), up.as<float>(), out.as<float>(), gate.numel(), stream_);
}

void CudaBackend::geglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) {
  if (step_op(StepOp::geglu, {step_key(gate), step_key(up), step_key(out)})) return;
  const auto timed = profile("geglu", gate.rows);
  geglu_f32_cuda(gate.as<float>(), up.as<float>(), out.as<float>(), gate.numel(), stream_);
}

void CudaBackend::add_impl(const Tensor& a, const Tensor& b) {
  if (step_op(StepOp::add, {step_key(a), step_key(b)})) return;
  const auto timed = profile("add", a.rows);
  add_f32_cuda(a.as<float>(), b.as<float>(), a.numel(), stream_);
}

void CudaBackend::add_rms_norm_impl(const Tensor& x, const Tensor& y, const Weight& w, float eps, const Tensor& xn,
                                    NextProduct next) {
  const CudaWeight& cw = cuda_vector(w, "add_rms_norm");
  check_grid_rows(x.rows, "add_rms_norm");
  // A decode product on 8-bit blocks comes next: xn's blocks for it in the same pass; a prefill
  // GEMM: its f16 operand.
  const int block = operand_block_for(next, x.rows, x.cols);
  const std::optional<int> f16_top = block ? std::nullopt : f16_operand_for(next, x.rows, x.cols);
  const bool replay = step_op(StepOp::add_rms_norm, {step_key(x), step_key(y), step_key(w), step_key(eps),
                                                     step_key(xn), uint64_t(block), f16_top.has_value(),
                                                     uint64_t(int64_t(f16_top.value_or(-2)))});
  if (f16_top) {
    const PreparedOperand& op = prepare_f16_operand(xn, next.weight, *f16_top);
    if (replay) return;
    const auto timed = profile("add_rms_norm+f16", x.rows);
    add_rms_norm_f16_cuda(x.as<float>(), y.as<float>(), cw.f32(), xn.as<float>(), x.rows, x.cols, eps, op.xh,
                          op.unscale, op.top, stream_);
    return;
  }
  if (block) {
    const quant_dot::ActQ8Out q8 = prepare_operand(xn, next.weight, block);
    if (replay) return;
    const auto timed = profile("add_rms_norm+q8", x.rows);
    add_rms_norm_q8_cuda(x.as<float>(), y.as<float>(), cw.f32(), xn.as<float>(), x.rows, x.cols, eps, block, q8,
                         stream_);
    return;
  }
  if (replay) return;
  const auto timed = profile("add_rms_norm", x.rows);
  add_rms_norm_f32_cuda(x.as<float>(), y.as<float>(), cw.f32(), xn.as<float>(), x.rows, x.cols, eps, stream_);
}

// The row indices of a scatter on the device (scatter_params_): destination rows, and the source
// row of each write that survives when a destination repeats.
CudaBackend::ScatterRows CudaBackend::scatter_rows_on_device(std::span<const int32_t> rows) {
  // Staging layout: int32 destination rows [k], then, when a destination repeats, the int32
  // source rows [k] of the writes that survive; otherwise source row i goes to rows[i].
  const std::optional<std::vector<int32_t>> keep = surviving_writes(rows);
  const size_t k = keep ? keep->size() : rows.size();
  host_staging_.resize(k * sizeof(int32_t) * (keep ? 2 : 1));
  auto* staged = reinterpret_cast<int32_t*>(host_staging_.data());
  if (keep) {
    for (size_t j = 0; j < k; ++j) {
      staged[j] = rows[(*keep)[j]];
      staged[k + j] = (*keep)[j];
    }
  } else {
    std::memcpy(staged, rows.data(), rows.size_bytes());
  }
  check_grid_rows(int64_t(k), "scatter_rows");
  const auto* dev = static_cast<const int32_t*>(upload_if_changed(scatter_params_));
  return {dev, keep ? dev + k : nullptr, int64_t(k)};
}

void CudaBackend::scatter_rows_impl(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows) {
  if (rows.empty() || src.cols == 0) return;
  const bool replay = step_op(StepOp::scatter_rows, {step_key(src), step_key(dst)});
  const auto timed = profile("scatter_rows", int64_t(rows.size()));
  const ScatterRows r = scatter_rows_on_device(rows);
  step_fold({uint64_t(r.n), r.src != nullptr});  // repeated rows: fewer writes, from other rows
  if (replay) return;
  if (dst.dtype == DType::f16)
    copy_rows_f32_to_f16_cuda(src.as<float>(), r.src, dst.as<__half>(), r.dst, r.n, src.cols, stream_);
  else
    copy_rows_f32_cuda(src.as<float>(), r.src, dst.as<float>(), r.dst, r.n, src.cols, stream_);
}

void CudaBackend::scatter_kv_rows_impl(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                                       std::span<const int32_t> rows) {
  if (rows.empty() || k.cols == 0) return;
  const bool replay = step_op(StepOp::scatter_kv_rows, {step_key(k), step_key(v), step_key(k_dst),
                               step_key(v_dst)});
  const auto timed = profile("scatter_kv_rows", int64_t(rows.size()));
  const ScatterRows r = scatter_rows_on_device(rows);
  step_fold({uint64_t(r.n), r.src != nullptr});  // repeated rows: fewer writes, from other rows
  if (replay) return;
  if (k_dst.dtype == DType::f16)
    copy_rows_pair_f32_to_f16_cuda(k.as<float>(), v.as<float>(), r.src, k_dst.as<__half>(), v_dst.as<__half>(), r.dst,
                                   r.n, k.cols, stream_);
  else
    copy_rows_pair_f32_cuda(k.as<float>(), v.as<float>(), r.src, k_dst.as<float>(), v_dst.as<float>(), r.dst, r.n,
                            k.cols, stream_);
}

void CudaBackend::rope_qk_scatter_kv_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                          std::span<const int32_t> positions, int n_head, int n_head_kv, int head_dim,
                                          const RopeParams& p, const Tensor& k_dst, const Tensor& v_dst,
                                          std::span<const int32_t> rows) {
  // (Q, K and V are f32: the scatter's source must be.)
  if (p.n_rot / 2 == 0 || q.rows == 0 || rows.empty() || k.cols == 0 ||
      surviving_writes(rows)) {  // nothing to rotate, or rows written twice: the two ops
    Backend::rope_qk_scatter_kv_impl(q, k, v, positions, n_head, n_head_kv, head_dim, p, k_dst, v_dst, rows);
    return;
  }
  check_grid_rows(int64_t(rows.size()), "rope_qk_scatter_kv");
  const bool replay = step_op(StepOp::rope_qk_scatter_kv, {step_key(q), step_key(k), step_key(v),
                               step_key(k_dst), step_key(v_dst), uint64_t(n_head), uint64_t(n_head_kv),
                               uint64_t(head_dim), uint64_t(p.n_rot), step_key(p.freq_scale), p.neox});
  const auto timed = profile("rope_qk_scatter_kv", q.rows);
  const RopeLaunch r = rope_launch(positions, q.rows, n_head, head_dim, p, /*inverse=*/false);
  const ScatterRows dst = scatter_rows_on_device(rows);
  step_fold({uint64_t(dst.n)});
  if (replay) return;
  rope_qk_scatter_kv_cuda(q.as<float>(), k.as<float>(), v.as<float>(), n_head_kv, r.positions, r.inv_freq, r.shape,
                          dst.dst, k_dst.data(), v_dst.data(), k_dst.dtype == DType::f16, stream_);
}

void CudaBackend::gather_rows_impl(const Tensor& src, const Tensor& out, std::span<const int32_t> rows) {
  if (rows.empty() || src.cols == 0) return;
  check_grid_rows(out.rows, "gather_rows");
  const bool replay = step_op(StepOp::gather_rows, {step_key(src), step_key(out)});
  const auto timed = profile("gather_rows", out.rows);

  host_staging_.resize(rows.size_bytes());
  std::memcpy(host_staging_.data(), rows.data(), rows.size_bytes());
  const auto* d_rows = static_cast<const int32_t*>(scratch_upload(rows.size_bytes()));
  if (replay) return;
  copy_rows_f32_cuda(src.as<float>(), d_rows, out.as<float>(), nullptr, out.rows, src.cols, stream_);
}

void CudaBackend::row_sq_dist_impl(const Tensor& a, const Tensor& b, std::span<const int32_t> rows,
                                   const Tensor& out) {
  if (rows.empty()) return;
  check_grid_rows(a.rows, "row_sq_dist");
  const bool replay = step_op(StepOp::row_sq_dist, {step_key(a), step_key(b), step_key(out)});
  const auto timed = profile("row_sq_dist", a.rows);

  host_staging_.resize(rows.size_bytes());
  std::memcpy(host_staging_.data(), rows.data(), rows.size_bytes());
  const auto* d_rows = static_cast<const int32_t*>(scratch_upload(rows.size_bytes()));
  if (replay) return;
  if (b.dtype == DType::f16)
    row_sq_dist_f16_cuda(a.as<float>(), b.as<__half>(), d_rows, out.as<float>(), a.rows, a.cols, stream_);
  else
    row_sq_dist_f32_cuda(a.as<float>(), b.as<float>(), d_rows, out.as<float>(), a.rows, a.cols, stream_);
}

void CudaBackend::attention_impl(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k, const Tensor& v,
                                 std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                                 const Tensor& out, SegmentMass* seg_mass, NextProduct next) {
  const int64_t n_q = q.rows;
  const bool key_totals = seg_mass && seg_mass->key_totals;
  const int64_t n_seg = seg_mass && !key_totals ? int64_t(seg_mass->seg_begin.size()) - 1 : 0;
  if (seg_mass) no_replay("attention with segment mass or key totals");
  if (key_totals) seg_mass->out->assign(static_cast<size_t>(n_kv), 0.f);
  else if (seg_mass) seg_mass->out->assign(static_cast<size_t>(n_q * p.n_head * n_seg), 0.f);
  if (n_q == 0) return;

  AttentionArgs a;
  a.q = q.as<float>();
  a.k = k.data();
  a.v = v.data();
  a.kv_f16 = k.dtype == DType::f16;
  a.n_q = n_q;
  a.n_kv = n_kv;
  a.n_head = p.n_head;
  a.n_kv_head = p.n_kv_head;
  a.head_dim = p.head_dim;
  a.scale = p.scale;
  a.softcap = p.softcap;
  a.sliding_window = p.sliding_window;
  a.causal = p.causal;
  a.out = out.as<float>();
  const bool deferred = key_totals && seg_mass->deferred;
  // The mass copied back at once (segment mass, or key totals not deferred) at the start of the
  // work buffer, a tensor-core mass pass's workspace after it: one reservation (work_reserve hands
  // out one buffer, which a larger reservation may move). Deferred totals have their own buffer.
  const size_t out_floats = seg_mass && n_seg > 0             ? seg_mass->out->size()
                            : key_totals && !deferred && n_kv > 0 ? size_t(n_kv)
                                                                  : 0;
  const size_t out_bytes = (out_floats * sizeof(float) + 255) / 256 * 256;
  if (seg_mass && n_seg > 0) {
    a.n_seg = int(n_seg);
    a.seg_mass = static_cast<float*>(work_reserve(out_bytes));
  }
  if (key_totals && n_kv > 0) {  // (no keys: no totals to sum, an empty vector)
    a.key_mass = deferred ? pending_mass_buffer(seg_mass->out, size_t(n_kv))
                          : static_cast<float*>(work_reserve(out_bytes));
    a.key_mass_first_row = seg_mass->first_query;
  }
  const AttentionRoute route = attention_route(a);  // from the shapes and the mass wanted, not the positions
  // A decode step recorded or replayed as a graph (cuda-step-graph.cpp): split-K's grid and the
  // uploaded key positions cover the key count rounded up to kStepKeyBucket, the count itself read
  // on the device, so that the step's kernels and copies keep their parameters for that many steps.
  const bool device_count = (capturing_ || replaying_) && route == AttentionRoute::split_k;
  const int64_t n_kv_bound = device_count ? (n_kv + kStepKeyBucket - 1) / kStepKeyBucket * kStepKeyBucket : n_kv;
  // A decode product on 8-bit blocks reads out next: the split-K combine quantises it for that
  // product as it stores it.
  const int q8_block = route == AttentionRoute::split_k ? operand_block_for(next, n_q, out.cols) : 0;
  const bool replay = step_op(StepOp::attention, {step_key(q), step_key(k), step_key(v), step_key(out),
                               uint64_t(q_pos.size()), uint64_t(n_kv_bound), uint64_t(p.n_head),
                               uint64_t(p.n_kv_head), uint64_t(p.head_dim), step_key(p.scale), step_key(p.softcap),
                               uint64_t(p.sliding_window), p.causal, uint64_t(route), uint64_t(q8_block)});
  const bool tensor_cores =
      route == AttentionRoute::mma || route == AttentionRoute::mma_key_mass || route == AttentionRoute::mma_segment_mass;
  if (tensor_cores) {  // then the mass pass's workspace, then the key ranges' partial sums of a split
    a.mass_work_bytes = route == AttentionRoute::mma_key_mass       ? attention_key_mass_work_bytes(a)
                        : route == AttentionRoute::mma_segment_mass ? attention_segment_mass_work_bytes(a)
                                                                    : 0;
    a.mma_work_bytes = attention_mma_work_bytes(a);
    const size_t mass_work_bytes = (a.mass_work_bytes + 255) / 256 * 256;
    auto* work = static_cast<uint8_t*>(work_reserve(out_bytes + mass_work_bytes + a.mma_work_bytes));
    if (a.seg_mass) a.seg_mass = reinterpret_cast<float*>(work);
    else if (a.key_mass && !deferred) a.key_mass = reinterpret_cast<float*>(work);
    if (a.mass_work_bytes) a.mass_work = work + out_bytes;
    if (a.mma_work_bytes) a.mma_work = work + out_bytes + mass_work_bytes;
  }

  // Positions and segment boundaries in one upload: the int64 boundaries first (aligned), then
  // the query and key positions, then (for the tensor-core kernel) the key tiles' bounds.
  const size_t seg_bytes = static_cast<size_t>(a.seg_mass ? n_seg + 1 : 0) * sizeof(int64_t);
  const size_t qpos_bytes = p.causal ? q_pos.size_bytes() : 0;
  const size_t kpos_bytes = p.causal ? static_cast<size_t>(n_kv_bound) * sizeof(int32_t) : 0;
  const size_t count_bytes = device_count ? sizeof(int32_t) : 0;
  tile_bounds_.clear();
  if (p.causal && tensor_cores) append_key_tile_bounds(k_pos.first(size_t(n_kv)), tile_bounds_);
  const size_t bounds_bytes = tile_bounds_.size() * sizeof(int32_t);
  host_staging_.assign(seg_bytes + qpos_bytes + kpos_bytes + bounds_bytes + count_bytes, 0);
  if (seg_bytes) std::memcpy(host_staging_.data(), seg_mass->seg_begin.data(), seg_bytes);
  if (qpos_bytes) std::memcpy(host_staging_.data() + seg_bytes, q_pos.data(), qpos_bytes);
  if (kpos_bytes)  // (past n_kv, zeros the kernel does not read)
    std::memcpy(host_staging_.data() + seg_bytes + qpos_bytes, k_pos.data(), size_t(n_kv) * sizeof(int32_t));
  if (bounds_bytes)
    std::memcpy(host_staging_.data() + seg_bytes + qpos_bytes + kpos_bytes, tile_bounds_.data(), bounds_bytes);
  if (count_bytes) {
    const auto count = static_cast<int32_t>(n_kv);
    std::memcpy(host_staging_.data() + seg_bytes + qpos_bytes + kpos_bytes + bounds_bytes, &count, sizeof count);
  }
  const auto* staged = static_cast<const uint8_t*>(upload_if_changed(attention_params_));
  if (a.seg_mass) a.seg_begin = reinterpret_cast<const int64_t*>(staged);
  a.q_pos = qpos_bytes ? reinterpret_cast<const int32_t*>(staged + seg_bytes) : nullptr;
  a.k_pos = kpos_bytes ? reinterpret_cast<const int32_t*>(staged + seg_bytes + qpos_bytes) : nullptr;
  a.k_tile_bounds = bounds_bytes ? reinterpret_cast<const int32_t*>(staged + seg_bytes + qpos_bytes + kpos_bytes)
                                 : nullptr;
  if (device_count) {
    a.n_kv = n_kv_bound;
    a.n_kv_device = reinterpret_cast<const int32_t*>(staged + seg_bytes + qpos_bytes + kpos_bytes + bounds_bytes);
  }
  if (route == AttentionRoute::split_k) {  // partial sums in the work buffer (no allocation per call)
    a.decode_work_bytes = attention_decode_work_bytes(a);
    a.decode_work = work_reserve(a.decode_work_bytes);
    a.decode_done = static_cast<unsigned*>(decode_done_);
  }
  if (q8_block) {  // after the uploads above, which drop any prepared operand
    a.q8 = prepare_operand(out, next.weight, q8_block);
    a.q8_block = q8_block;
  }
  if (replay) return;
  const auto timed = profile(attention_profile_name(route), n_q);
  attention_cuda(a, stream_);
  if (a.key_mass && !deferred) {
    CUDA_CHECK(cudaMemcpyAsync(seg_mass->out->data(), a.key_mass, size_t(n_kv) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host vector is read on return
  }
  if (a.seg_mass) {
    CUDA_CHECK(cudaMemcpyAsync(seg_mass->out->data(), a.seg_mass, seg_mass->out->size() * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host vector is read on return
  }
}

}  // namespace ragkv
