// LayerKvLoader: one background thread per prompt; layer buffers handed over under a mutex.
#include "core/kv/layer-loader.h"

#include <chrono>

namespace ragkv {

using Clock = std::chrono::steady_clock;

LayerKvLoader::LayerKvLoader(std::vector<const SegmentKv*> jobs, int n_layer, int depth)
    : jobs_(std::move(jobs)), n_layer_(n_layer), depth_(std::max(depth, 1)) {
  staging_.resize(static_cast<size_t>(n_layer_));
  ready_.resize(static_cast<size_t>(n_layer_));
  thread_ = std::thread([this] { run(); });
}

LayerKvLoader::~LayerKvLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LayerKvLoader::run() {
  for (int l = 0; l < n_layer_; ++l) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || l < released_ + depth_; });
      if (stop_) return;
    }
    const auto t0 = Clock::now();
    std::vector<std::vector<uint16_t>> staging(jobs_.size());
    std::vector<HostKvLayer> ready(jobs_.size());
    for (size_t j = 0; j < jobs_.size(); ++j) {
      try {
        ready[j] = jobs_[j]->host_layer(l, staging[j]);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu_);
        failed_ = true;
        failed_job_ = j;
        failure_ = e.what();
        cv_.notify_all();
        return;
      }
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::lock_guard lock(mu_);
    staging_[size_t(l)] = std::move(staging);  // the vectors move, the pointers into them stay valid
    ready_[size_t(l)] = std::move(ready);
    load_ms_ += ms;
    loaded_ = l + 1;
    cv_.notify_all();
  }
}

void LayerKvLoader::wait_layer(int l) {
  const auto t0 = Clock::now();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return loaded_ > l || failed_; });
  wait_ms_ += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (loaded_ <= l) throw ChunkLoadFailed(failed_job_, failure_);
}

void LayerKvLoader::release_layer(int l) {
  std::lock_guard lock(mu_);
  staging_[size_t(l)].clear();
  staging_[size_t(l)].shrink_to_fit();
  ready_[size_t(l)].clear();
  released_ = std::max(released_, l + 1);
  cv_.notify_all();
}

double LayerKvLoader::load_ms() const {
  std::lock_guard lock(mu_);
  return load_ms_;
}

}  // namespace ragkv
