// The CUDA backend's step graphs (Backend::begin_step, cuda-backend.h): a decode step captured by
// stream capture in relaxed mode, the previous executable graph updated in place
// (cudaGraphExecUpdate) or instantiated anew on another topology, and launched once; the pinned
// copies the capture's uploads read (staged_source), and the pinned ring eager uploads read. Any
// step that cannot be captured or launched is reported back (end_step false) and runs op by op;
// three such steps turn graphs off. On by default (RAGKV_CUDA_GRAPHS=0: every step op by op).
//
// Captured once (issue 40 item 4): the steps after a capture are replayed. A decode step's
// kernels and copies keep their parameters from one step to the next — what changes (token ids,
// positions, the KV row written, the key count) is data the graph copies from the pinned buffer,
// split-K attention's grid covering the key count rounded up to kStepKeyBucket — so each op of a
// replayed step only folds its arguments into a signature and stages its uploads at the offsets
// the captured copies read, and end_step launches the recorded graph again when the signature,
// the number of pinned bytes staged and the backend's buffers are the recorded step's: no
// capture, no update, no launch per kernel on the host. Another step (a bucket crossed, a sequence added, a buffer
// grown) runs op by op, uncounted as a failure, and the steps after it are captured until two in
// a row are alike (more after replays that missed at once: replay_missed).
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/util/error.h"
#include "cuda/cuda-backend.h"
#include "cuda/cuda-check.h"
#include "cuda/cuda-weight.h"

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
  if (!capturing_ && !replaying_) return eager_source(bytes);
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

uint64_t CudaBackend::step_key(const Weight& w) {
  const CudaWeight& cw = cuda_weight(w);
  uint64_t h = reinterpret_cast<uintptr_t>(cw.f16()) ^ (uint64_t(cw.dtype()) << 56);
  for (const QuantPart& p : cw.parts())
    h = (h ^ reinterpret_cast<uintptr_t>(p.data) ^ (uint64_t(p.type) << 48) ^ uint64_t(p.rows)) * 0x100000001b3ull;
  return h;
}

// A replay that did not launch: the step runs op by op and the steps after it are captured until
// enough in a row are alike (replay_after_, doubled when the replay came right after the captures
// that allowed it: a step that captures but cannot be replayed is not tried every other step).
void CudaBackend::replay_missed() {
  ++step_stats_.missed;
  if (!replayed_since_ready_) replay_after_ = std::min(64, 2 * replay_after_);
  same_captures_ = 0;
  recorded_step_ = {};
  forget_repeated_uploads();
}

bool CudaBackend::step_op(StepOp op, std::initializer_list<uint64_t> args) {
  // Any op but a product may write the memory a prepared operand was made from.
  if (op != StepOp::matmul && op != StepOp::glu_ffn) prepared_ = {};
  if (!capturing_ && !replaying_) return false;
  step_fold({step_key(op)});
  step_fold(args);
  return replaying_;
}

void CudaBackend::step_fold(std::initializer_list<uint64_t> words) {
  if ((!capturing_ && !replaying_) || op_depth_ > 0) return;
  for (const uint64_t v : words) {  // FNV-1a over the words
    step_signature_ ^= v;
    step_signature_ *= 1099511628211ull;
  }
}

void CudaBackend::no_replay(const char* what) const {
  if (replaying_) throw Error(fmt::format("internal: a replayed CUDA step graph meets {}", what));
}

void CudaBackend::forget_repeated_uploads() {
  for (RepeatedUpload* u : repeated_uploads()) u->host.clear();
}

bool CudaBackend::begin_step() {
  if (!graphs_) {
    if (!deferred_free_.empty()) {  // buffers the last failed captures replaced
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      free_deferred();
    }
    return false;
  }
  // The previous step's graph has finished with the pinned buffer and the replaced buffers.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  stream_synced();
  free_deferred();
  const size_t want = std::max<size_t>(size_t(1) << 20, 2 * capture_host_needed_);
  step_signature_ = 14695981039346656037ull;
  capture_host_used_ = 0;
  capture_failed_ = false;
  op_depth_ = 0;
  if (replay_ready() && step_exec_ && capture_host_bytes_ >= want && step_buffers() == recorded_step_.buffers) {
    replaying_ = true;  // the ops stage their uploads; end_step decides
    return true;
  }
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
  if (replaying_) {
    replaying_ = false;
    if (!capture_failed_ && step_signature_ == recorded_step_.signature &&
        capture_host_used_ == recorded_step_.pinned_used && step_buffers() == recorded_step_.buffers) {
      if (cudaGraphLaunch(step_exec_, stream_) == cudaSuccess) {
        ++step_stats_.replayed;
        replayed_since_ready_ = true;
        replay_after_ = 2;
        return true;
      }
      (void)cudaGetLastError();
      step_not_launched();
      return false;
    }
    // Another step: nothing was launched or copied; it runs op by op and the next is captured.
    replay_missed();
    return false;
  }
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
  // A pinned buffer too small for the step's uploads is no failure: the next step's capture gets
  // one twice the size needed (begin_step).
  const bool only_room = capture_failed_ && ended == cudaSuccess && graph != nullptr;
  if (graph) CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
  if (!ok) {
    step_not_launched(/*count_failure=*/!only_room);
    return false;
  }
  ++step_stats_.captured;
  // Replayed from the next step on once replay_after_ steps in a row were alike (two at first):
  // steps whose parameters change every time (attention on the tensor-core kernel, its key count
  // a kernel argument, where more than kDecodeMaxVectors query vectors share a KV head) keep being
  // captured instead of missing every other replay.
  const StepRecord step{step_signature_, capture_host_used_, step_buffers()};
  const bool alike = step.signature == recorded_step_.signature && step.pinned_used == recorded_step_.pinned_used &&
                     step.buffers == recorded_step_.buffers;
  same_captures_ = alike ? same_captures_ + 1 : 1;
  recorded_step_ = step;
  if (replay_ready()) replayed_since_ready_ = false;
  return true;
}

void CudaBackend::abort_step() {
  if (replaying_) {  // given up part-way (no_replay): nothing was launched or copied
    replaying_ = false;
    replay_missed();
    return;
  }
  if (!capturing_) return;
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);
  (void)cudaGetLastError();
  if (graph) CUDA_CHECK_NOTHROW(cudaGraphDestroy(graph));
  step_not_launched();
}

void CudaBackend::step_not_launched(bool count_failure) {
  // The lost graph's uploads never ran: the device holds what it held before them.
  forget_repeated_uploads();
  same_captures_ = 0;
  recorded_step_ = {};
  if (count_failure && ++graph_failures_ == 3) {
    graphs_ = false;
    std::fprintf(stderr, "ragkv: %s: decode steps could not be launched as CUDA graphs 3 times; running them "
                 "unrecorded\n", name_.c_str());
  }
}

std::string CudaBackend::step_summary() const {
  const StepGraphStats& s = step_stats_;
  if (s.captured + s.replayed + s.missed == 0) return {};
  return fmt::format("{} captured, {} replayed, {} missed", s.captured, s.replayed, s.missed);
}

void CudaBackend::free_deferred() {
  for (void* p : deferred_free_) CUDA_CHECK_NOTHROW(cudaFree(p));
  deferred_free_.clear();
}

}  // namespace ragkv
