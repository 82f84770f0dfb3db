// Speculative loading of chunk caches (RAGCache §5.3, Algorithm 2 with one worker): while a
// query's staged vector search still runs, `answer` asks for the caches of its current top-k;
// one loader thread reads them layer by layer through the disk tier's own read path
// (DiskSegmentKv::host_layer: pread, XXH64 check, decode), so when the prompt is planned the
// files' pages are in the OS page cache and only verification is left. A load that is no
// longer wanted (the top-k changed) is dropped from the queue or stopped after the layer being
// read; what it had read is wasted work and counted.
//
// The loaded layers are not kept: the host and device tiers belong to the answering thread's
// knowledge tree (core/kv/kv-tiers.h), whose budgets and replacement decide what stays in memory.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/kv/kv-store.h"

namespace ragkv {

struct KvPrefetchStats {
  size_t wanted = 0;     // loads asked for (a load already done, running or queued is not asked again)
  size_t started = 0;    // loads the thread began
  size_t completed = 0;  // every layer read and verified
  size_t missing = 0;    // no file for any candidate key (the prompt computes that chunk)
  size_t failed = 0;     // a file that failed its checks (the prompt's own load finds it too)
  size_t dropped = 0;    // no longer wanted: removed from the queue before they began
  size_t stopped = 0;    // no longer wanted: stopped part-way, or unwanted after they completed
  size_t wasted_loads = 0;   // of stopped: those that had read at least one layer
  uint64_t bytes_read = 0;   // K+V bytes of every layer read (f16, as loaded)
  uint64_t wasted_bytes = 0; // of those, by loads that were no longer wanted
  double busy_ms = 0;        // loader time spent reading and verifying
};

class KvPrefetcher {
 public:
  explicit KvPrefetcher(const KvStore& store);
  ~KvPrefetcher();  // stops and joins the thread (a load under way ends after its layer)
  KvPrefetcher(const KvPrefetcher&) = delete;
  KvPrefetcher& operator=(const KvPrefetcher&) = delete;

  // Queues the load `name` (the caller's identity for it): the first of `candidates` the store
  // has a file for. A no-op while `name` is queued, running or done (and still wanted).
  void want(const std::string& name, std::vector<ChunkKvMeta> candidates);
  // `name` is no longer wanted: out of the queue, or stopped after its current layer; the bytes
  // it read count as wasted. A no-op for a name never wanted or already unwanted.
  void unwant(const std::string& name);
  void wait_idle();  // until the queue is empty and no load runs (tests, and the end of a run)
  KvPrefetchStats stats() const;

 private:
  enum class State { queued, running, done, unwanted };
  struct Load {
    State state = State::queued;
    std::vector<ChunkKvMeta> candidates;
    uint64_t bytes = 0;
    bool stop = false;  // running: unwanted meanwhile
  };
  void run();

  const KvStore& store_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::map<std::string, Load> loads_;
  std::deque<std::string> queue_;
  bool running_ = false, quit_ = false;
  KvPrefetchStats stats_;
  std::thread thread_;
};

}  // namespace ragkv
