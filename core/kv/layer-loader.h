// Layer-wise loading of chunk caches, pipelined with compute (CacheBlend §5; Cache-Craft §5,
// Algorithm 2's preload depth): a loader thread brings layer l + 1.. of every host-side cached
// segment of a prompt (disk: read and verify; host: already verified) into host memory while the
// fusor computes layer l. The fusor takes layer l with wait_layer(l); the time it waited is the
// part of loading that compute did not hide.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/kv/segment-kv.h"
#include "core/util/error.h"

namespace ragkv {

// A chunk cache that failed while loading (corrupt layer block, short read): the caller
// recomputes that chunk and counts the event.
class ChunkLoadFailed : public Error {
 public:
  ChunkLoadFailed(size_t job, const std::string& what) : Error(what), job(job) {}
  size_t job;  // index into the jobs given to LayerKvLoader (the fusor re-raises it per segment)
};

class LayerKvLoader {
 public:
  // Starts loading every job's layers 0, 1, … in order, at most `depth` layers ahead of the
  // last layer the caller released (depth ≥ 1). Jobs are disk- or host-tier segments.
  LayerKvLoader(std::vector<const SegmentKv*> jobs, int n_layer, int depth = 2);
  ~LayerKvLoader();  // stops and joins the loader
  LayerKvLoader(const LayerKvLoader&) = delete;
  LayerKvLoader& operator=(const LayerKvLoader&) = delete;

  // Blocks until layer l of every job is ready (layers must be taken in order); throws
  // ChunkLoadFailed for the first job whose layer could not be loaded.
  void wait_layer(int l);
  // Job j's layer l in host memory; valid after wait_layer(l) until release_layer(l).
  HostKvLayer layer(size_t j, int l) const { return ready_[size_t(l)][j]; }
  void release_layer(int l);  // frees layer l's buffers and lets the loader move on

  double load_ms() const;  // loader busy time (read + verify), total so far
  double wait_ms() const { return wait_ms_; }  // caller time blocked in wait_layer

 private:
  void run();

  std::vector<const SegmentKv*> jobs_;
  int n_layer_, depth_;
  std::vector<std::vector<std::vector<uint16_t>>> staging_;  // [layer][job] (disk tier reads)
  std::vector<std::vector<HostKvLayer>> ready_;                // [layer][job]
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int loaded_ = 0;     // layers [0, loaded_) are ready
  int released_ = 0;   // layers [0, released_) were taken and freed
  bool stop_ = false;
  bool failed_ = false;
  size_t failed_job_ = 0;
  std::string failure_;
  double load_ms_ = 0, wait_ms_ = 0;
  std::thread thread_;
};

}  // namespace ragkv
