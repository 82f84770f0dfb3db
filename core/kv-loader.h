// Layer-wise loading of chunk caches, pipelined with compute (CacheBlend §5; Cache-Craft §5,
// Algorithm 2's preload depth): a loader thread reads and verifies layer l + 1.. of every cached
// chunk of a prompt from the store while the fusor computes layer l. The fusor takes layer l
// with wait_layer(l); the time it waited is the part of loading that compute did not hide.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/kv-store.h"

namespace ragkv {

// A chunk cache that failed while loading (corrupt layer block, short read): the caller
// recomputes that chunk and counts the event.
class ChunkLoadFailed : public Error {
 public:
  ChunkLoadFailed(size_t job, const std::string& what) : Error(what), job(job) {}
  size_t job;  // index into the jobs given to LayerKvLoader
};

class LayerKvLoader {
 public:
  // Starts loading every job's layers 0, 1, … in order, at most `depth` layers ahead of the
  // last layer the caller took (depth ≥ 1).
  LayerKvLoader(std::vector<const ChunkKvReader*> jobs, int n_layer, int depth = 2);
  ~LayerKvLoader();  // stops and joins the loader
  LayerKvLoader(const LayerKvLoader&) = delete;
  LayerKvLoader& operator=(const LayerKvLoader&) = delete;

  // Blocks until layer l of every job is read and verified (layers must be taken in order);
  // throws ChunkLoadFailed for the first job whose layer could not be loaded.
  void wait_layer(int l);
  // f16 [n_tokens][kv_dim] of job j at layer l; valid after wait_layer(l) until release_layer(l).
  const uint16_t* k(size_t j, int l) const { return buf_[l][j].data(); }
  const uint16_t* v(size_t j, int l) const { return buf_[l][j].data() + buf_[l][j].size() / 2; }
  void release_layer(int l);  // frees layer l's buffers and lets the loader move on

  double load_ms() const;  // loader busy time (read + verify), total so far
  double wait_ms() const { return wait_ms_; }  // caller time blocked in wait_layer

 private:
  void run();

  std::vector<const ChunkKvReader*> jobs_;
  int n_layer_, depth_;
  std::vector<std::vector<std::vector<uint16_t>>> buf_;  // [layer][job] K then V
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
