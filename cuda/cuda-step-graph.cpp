// The CUDA backend's step graphs (Backend::begin_step, cuda-backend.h): a decode step captured by
// stream capture in relaxed mode, the previous executable graph updated in place
// (cudaGraphExecUpdate) or instantiated anew on another topology, and launched once; the pinned
// copies the capture's uploads read (staged_source), and the pinned ring eager uploads read. Any
// step that cannot be captured or launched is reported back (end_step false) and runs op by op;
// three such steps turn graphs off.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "cuda/cuda-backend.h"
#include "cuda/cuda-check.h"

namespace ragkv {

const void* CudaBackend::eager_source(size_t bytes) {
  if (bytes > upload_ring_max_ / 4 || upload_ring_failed_) return host_staging_.data();
  size_t offset = (upload_ring_used_ + 255) / 256 * 256;
  if (!upload_ring_ || offset + bytes > upload_ring_bytes_) {
    if (upload_ring_ && upload_ring_bytes_ >= upload_ring_max_) {  // at its largest: reuse once the copies ran
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      stream_synced();
      offset = 0;
    } else {
      const size_t want = std::min(upload_ring_max_, std::max({upload_ring_min_, 2 * upload_ring_bytes_, 4 * bytes}));
      void* ring = nullptr;
      if (cudaMallocHost(&ring, want) != cudaSuccess) {
        (void)cudaGetLastError();
        if (!upload_ring_) {
          upload_ring_failed_ = true;  // pageable uploads, as before the ring
          return host_staging_.data();
        }
        upload_ring_max_ = upload_ring_bytes_;  // this one it is: wait for its copies instead
        return eager_source(bytes);
      }
      if (upload_ring_) retired_rings_.push_back(upload_ring_);  // copies queued from it may still read it
      upload_ring_ = ring;
      upload_ring_bytes_ = want;
      offset = 0;
    }
  }
  auto* dst = static_cast<uint8_t*>(upload_ring_) + offset;
  std::memcpy(dst, host_staging_.data(), bytes);
  upload_ring_used_ = offset + bytes;
  return dst;
}

void CudaBackend::stream_synced() {
  upload_ring_used_ = 0;
  for (void* ring : retired_rings_) CUDA_CHECK_NOTHROW(cudaFreeHost(ring));
  retired_rings_.clear();
}

const void* CudaBackend::staged_source(size_t bytes) {
  if (!capturing_) return eager_source(bytes);
  const size_t offset = (capture_host_used_ + 255) / 256 * 256;
  capture_host_needed_ = std::max(capture_host_needed_, offset + bytes);
  if (offset + bytes > capture_host_bytes_) {
    capture_failed_ = true;  // the next step's capture gets a larger buffer
    return nullptr;
  }
  auto* dst = static_cast<uint8_t*>(capture_host_) + offset;
  std::memcpy(dst, host_staging_.data(), bytes);
  capture_host_used_ = offset + bytes;
  return dst;
}

bool CudaBackend::begin_step() {
  if (!graphs_) return false;
  // The previous step's graph has finished with the pinned buffer and the replaced buffers.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  stream_synced();
  free_deferred();
  const size_t want = std::max<size_t>(size_t(1) << 20, 2 * capture_host_needed_);
  if (capture_host_bytes_ < want) {
    if (capture_host_) CUDA_CHECK(cudaFreeHost(capture_host_));
    capture_host_ = nullptr;
    capture_host_bytes_ = 0;
    if (cudaMallocHost(&capture_host_, want) != cudaSuccess) {
      (void)cudaGetLastError();
      capture_host_ = nullptr;
      graphs_ = false;
      std::fprintf(stderr, "ragkv: %s: no pinned memory for step graphs; running steps unrecorded\n", name_.c_str());
      return false;
    }
    capture_host_bytes_ = want;
  }
  capture_host_used_ = capture_host_needed_ = 0;
  capture_failed_ = false;
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
    (void)cudaGetLastError();
    step_not_launched();
    return false;
  }
  capturing_ = true;
  return true;
}

bool CudaBackend::end_step() {
  if (!capturing_) return false;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  bool ok = ended == cudaSuccess && graph != nullptr && !capture_failed_;
  if (ok && step_exec_) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(step_exec_, graph, &info) != cudaSuccess) {  // another topology: anew
      (void)cudaGetLastError();
      CUDA_CHECK_NOTHROW(cudaGraphExecDestroy(step_exec_));
      step_exec_ = nullptr;
    }
  }
  if (ok && !step_exec_ && cudaGraphInstantiate(&step_exec_, graph, 0) != cudaSuccess) {
    step_exec_ = nullptr;
    ok = false;
  }
  if (ok && cudaGraphLaunch(step_exec_, stream_) != cudaSuccess) ok = false;
  if (!ok) (void)cudaGetLastError();
  if (graph) CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
  if (!ok) step_not_launched();
  return ok;
}

void CudaBackend::abort_step() {
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);
  (void)cudaGetLastError();
  if (graph) CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
  step_not_launched();
}

void CudaBackend::step_not_launched() {
  // The lost graph's uploads never ran: the device holds what it held before them.
  for (RepeatedUpload* u : repeated_uploads()) u->host.clear();
  if (++graph_failures_ == 3) {
    graphs_ = false;
    std::fprintf(stderr, "ragkv: %s: decode steps could not be launched as CUDA graphs 3 times; running them "
                 "unrecorded\n", name_.c_str());
  }
}

void CudaBackend::free_deferred() {
  for (void* p : deferred_free_) CUDA_CHECK_NOTHROW(cudaFree(p));
  deferred_free_.clear();
}

}  // namespace ragkv
