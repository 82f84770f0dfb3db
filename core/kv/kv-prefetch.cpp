// KvPrefetcher: one loader thread over a queue of wanted chunk caches.
#include "core/kv/kv-prefetch.h"

#include <chrono>

#include "core/kv/segment-kv.h"

namespace ragkv {

KvPrefetcher::KvPrefetcher(const KvStore& store) : store_(store) { thread_ = std::thread([this] { run(); }); }

KvPrefetcher::~KvPrefetcher() {
  {
    std::lock_guard l(mu_);
    quit_ = true;
    for (auto& [name, load] : loads_) load.stop = true;
  }
  cv_.notify_all();
  thread_.join();
}

void KvPrefetcher::want(const std::string& name, std::vector<ChunkKvMeta> candidates) {
  {
    std::lock_guard l(mu_);
    auto it = loads_.find(name);
    if (it != loads_.end() && it->second.state != State::unwanted) return;
    Load load;
    load.candidates = std::move(candidates);
    loads_[name] = std::move(load);
    queue_.push_back(name);
    ++stats_.wanted;
  }
  cv_.notify_all();
}

void KvPrefetcher::unwant(const std::string& name) {
  std::lock_guard l(mu_);
  auto it = loads_.find(name);
  if (it == loads_.end()) return;
  Load& load = it->second;
  switch (load.state) {
    case State::queued:
      ++stats_.dropped;
      load.state = State::unwanted;  // run() skips it when it comes out of the queue
      break;
    case State::running:
      load.stop = true;  // run() counts its bytes as wasted when it stops
      break;
    case State::done:
      ++stats_.stopped;
      if (load.bytes > 0) ++stats_.wasted_loads;
      stats_.wasted_bytes += load.bytes;
      load.state = State::unwanted;
      break;
    case State::unwanted:
      break;
  }
}

void KvPrefetcher::wait_idle() {
  std::unique_lock l(mu_);
  idle_cv_.wait(l, [&] { return queue_.empty() && !running_; });
}

KvPrefetchStats KvPrefetcher::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

void KvPrefetcher::run() {
  std::vector<uint16_t> staging;
  for (;;) {
    std::string name;
    std::vector<ChunkKvMeta> candidates;
    {
      std::unique_lock l(mu_);
      running_ = false;
      idle_cv_.notify_all();
      cv_.wait(l, [&] { return quit_ || !queue_.empty(); });
      if (quit_) return;
      name = std::move(queue_.front());
      queue_.pop_front();
      Load& load = loads_.at(name);
      if (load.state != State::queued) continue;  // unwanted while queued
      load.state = State::running;
      load.stop = false;
      candidates = load.candidates;
      running_ = true;
      ++stats_.started;
    }
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t bytes = 0;
    bool missing = true, failed = false, stopped = false;
    try {
      for (const ChunkKvMeta& key : candidates) {
        std::optional<ChunkKvReader> file = store_.open_chunk(key);
        if (!file) continue;
        missing = false;
        const DiskSegmentKv seg(std::move(*file));
        for (int layer = 0; layer < int(seg.meta().n_layer); ++layer) {
          {
            std::lock_guard l(mu_);
            if (loads_.at(name).stop) {
              stopped = true;
              break;
            }
          }
          seg.host_layer(layer, staging);  // the disk tier's read: pread, checksum, decode
          bytes += seg.layer_bytes();
        }
        break;
      }
    } catch (const std::exception&) {
      failed = true;  // the prompt's own load meets the same file, and recomputes and counts it
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard l(mu_);
    Load& load = loads_.at(name);
    load.bytes = bytes;
    load.candidates.clear();
    stats_.bytes_read += bytes;
    stats_.busy_ms += ms;
    stopped = stopped || load.stop;
    if (stopped) {
      load.state = State::unwanted;
      ++stats_.stopped;
      if (bytes > 0) ++stats_.wasted_loads;
      stats_.wasted_bytes += bytes;
    } else {
      load.state = State::done;
      if (failed) ++stats_.failed;
      else if (missing) ++stats_.missing;
      else ++stats_.completed;
    }
  }
}

}  // namespace ragkv
