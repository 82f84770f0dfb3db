// Per-op device time of the CUDA backend from CUDA events (op-profile.h).
#include "cuda/op-profile.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/util/file-io.h"
#include "cuda/cuda-check.h"
#include "cuda/quant-matmul.cuh"

namespace ragkv {

namespace {

// Events recorded before the host waits for them and folds them in: enough that a decode step
// (a few hundred ops) runs ahead, few enough to bound the events held.
constexpr size_t kBatchOps = 4096;

}  // namespace

std::string_view OpTimeTable::phase_of(int64_t rows) { return rows <= kQuantGemvMaxRows ? "decode" : "prefill"; }

void OpTimeTable::add(std::string_view section, std::string_view op, int64_t rows, double ms, double idle_ms) {
  auto sec = std::find_if(sections_.begin(), sections_.end(), [&](const Section& x) { return x.name == section; });
  if (sec == sections_.end()) {
    sections_.push_back({std::string(section), {}, {}});
    sec = sections_.end() - 1;
  }
  const std::string phase(phase_of(rows));
  Total& t = sec->ops[{std::string(op), phase}];
  ++t.calls;
  t.rows += rows;
  t.ms += ms;
  Phase& p = sec->phases[phase];
  p.busy_ms += ms;
  p.idle_ms += std::max(0.0, idle_ms);
  ++p.ops;
}

std::string OpTimeTable::json(std::string_view device, std::string_view kernels, double span_ms) const {
  nlohmann::json j;
  j["device"] = device;
  j["kernels"] = kernels;
  j["span_ms"] = span_ms;
  nlohmann::json sections = nlohmann::json::array();
  for (const Section& sec : sections_) {
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [name, p] : sec.phases)
      phases[name] = {{"busy_ms", p.busy_ms}, {"idle_ms", p.idle_ms}, {"ops", p.ops}};
    std::vector<std::pair<std::pair<std::string, std::string>, Total>> rows(sec.ops.begin(), sec.ops.end());
    std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& [key, t] : rows) {
      const double phase_ms = sec.phases.at(key.second).busy_ms;
      ops.push_back({{"op", key.first},
                     {"phase", key.second},
                     {"calls", t.calls},
                     {"rows", t.rows},
                     {"ms", t.ms},
                     {"ms_per_call", t.ms / double(t.calls)},
                     {"share_of_phase", phase_ms > 0 ? t.ms / phase_ms : 0.0}});
    }
    sections.push_back({{"section", sec.name}, {"phases", phases}, {"ops", ops}});
  }
  j["sections"] = sections;
  return j.dump(2) + "\n";
}

CudaOpProfiler::CudaOpProfiler(std::string path, cudaStream_t stream) : path_(std::move(path)), stream_(stream) {}

CudaOpProfiler::~CudaOpProfiler() {
  CUDA_CHECK_NOTHROW(cudaStreamSynchronize(stream_));
  for (const Pending& p : pending_) {
    CUDA_CHECK_NOTHROW(cudaEventDestroy(p.start));
    if (p.stop) CUDA_CHECK_NOTHROW(cudaEventDestroy(p.stop));
  }
  for (cudaEvent_t e : free_) CUDA_CHECK_NOTHROW(cudaEventDestroy(e));
  if (first_) CUDA_CHECK_NOTHROW(cudaEventDestroy(first_));
  if (last_stop_) CUDA_CHECK_NOTHROW(cudaEventDestroy(last_stop_));
}

cudaEvent_t CudaOpProfiler::take_event() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreate(&e));  // with timing
  return e;
}

CudaOpProfiler::Scope::Scope(CudaOpProfiler* p, std::string op, int64_t rows) : p_(p) {
  if (p_->pending_.size() >= kBatchOps && p_->open_ == 0) p_->drain();
  Pending e;
  e.section = p_->section_;
  e.op = std::move(op);
  e.rows = rows;
  e.start = p_->take_event();
  if (const cudaError_t err = cudaEventRecord(e.start, p_->stream_); err != cudaSuccess) {
    p_->free_.push_back(e.start);  // nothing recorded: the op goes untimed
    p_ = nullptr;
    (void)cudaGetLastError();
    return;
  }
  index_ = p_->pending_.size();
  p_->pending_.push_back(std::move(e));
  ++p_->open_;
}

CudaOpProfiler::Scope::~Scope() {
  if (!p_) return;
  --p_->open_;
  Pending& e = p_->pending_[index_];
  cudaEvent_t stop = nullptr;
  if (!p_->free_.empty()) {
    stop = p_->free_.back();
    p_->free_.pop_back();
  } else if (cudaEventCreate(&stop) != cudaSuccess) {
    (void)cudaGetLastError();
    stop = nullptr;
  }
  if (stop && cudaEventRecord(stop, p_->stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    p_->free_.push_back(stop);
    stop = nullptr;
  }
  e.stop = stop;  // nullptr: the op is dropped from the table (its launch failed, or events did)
}

void CudaOpProfiler::drain() {
  if (pending_.empty() || open_ > 0) return;  // an op still open keeps its index into pending_
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (Pending& e : pending_) {
    if (!e.stop) {
      free_.push_back(e.start);
      continue;
    }
    float ms = 0, idle = 0, span = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, e.start, e.stop));
    if (last_stop_) CUDA_CHECK(cudaEventElapsedTime(&idle, last_stop_, e.start));
    table_.add(e.section, e.op, e.rows, ms, last_stop_ ? idle : 0.0);
    if (!first_) {
      first_ = e.start;  // kept, not recycled
    } else {
      free_.push_back(e.start);
    }
    if (last_stop_) free_.push_back(last_stop_);
    last_stop_ = e.stop;
    CUDA_CHECK(cudaEventElapsedTime(&span, first_, last_stop_));
    span_ms_ = span;
  }
  pending_.clear();
}

void CudaOpProfiler::write(std::string_view device, std::string_view kernels) {
  drain();
  const std::string content = table_.json(device, kernels, span_ms_);
  write_file_atomic(path_, {std::string_view(content)});
}

}  // namespace ragkv
