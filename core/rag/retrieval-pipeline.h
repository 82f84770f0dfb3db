// Retrieval overlapped with answering (RAGCache §5.3): a worker thread embeds and
// searches the queries in input order ahead of the answering loop, which takes each query's
// chunks as soon as they are there. With a staged search and a prefetcher, every change of a
// query's top-k during its search starts loading the caches of the new top-k (dynamic
// speculative pipelining, Algorithm 2 with one worker: core/rag/speculation.h keeps the longest common
// chunk prefix and terminates the rest). The chunks a query is answered over are always its final
// top-k — the same as ContextRetriever::context_for's without a pipeline.
//
// The embedder computes on the backend the answering loop uses; backends are not safe for
// concurrent use (and OpenBLAS's OpenMP build may corrupt data when called from two threads at
// once), so the worker embeds only while holding backend_turn, which the answering loop holds
// while it prefills and decodes. The search (hnswlib's graph, plain C++) and the loads run
// beside the answering loop's compute.
//
// Without `background`, run_all() retrieves everything on the caller's thread first, as
// `answer` does without --pipeline (its default): every search then precedes the first answer (RAGCache's T2).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/kv/kv-prefetch.h"
#include "core/rag/cache-keys.h"
#include "core/rag/context.h"
#include "core/rag/queries.h"
#include "core/util/turn-lock.h"

namespace ragkv {

// The loads that serve a chunk sequence, one per prompt position: a name (the chunk's
// knowledge-tree path, "@prefix/c1/…/ci") and the store keys to try in order (its exact chain
// node, then its canonical cache).
using LoadPlan = std::function<std::vector<std::pair<std::string, std::vector<ChunkKvMeta>>>(
    const std::vector<const Chunk*>& chunks)>;
// The knowledge tree's loads for a prompt of this model and format (core/rag/plan.h looks them up the
// same way: an exact chain node when the store has one, else the chunk's canonical cache).
LoadPlan tree_load_plan(const CacheKeys& keys, const PromptFormat& format);

struct RetrievalPipelineOptions {
  bool background = true;  // a worker thread retrieves ahead of the answering loop
  size_t slice = 0;        // > 0 with a prefetcher: staged search and speculative loads
};

// Totals over the queries retrieved so far.
struct RetrievalStats {
  size_t searched = 0;         // queries embedded and searched (not pinned)
  double search_ms = 0;        // embedding + search, summed over the queries (RAGCache's search time)
  double embed_ms = 0, hnsw_ms = 0;
  double turn_wait_ms = 0;     // the worker waiting for the backend (the answering loop computing)
  double speculate_ms = 0;     // the worker's speculation: each changed top-k's loads worked out and queued
  size_t speculations = 0;     // snapshots that changed a query's speculated top-k
  size_t restarts = 0;         // of those, the ones that terminated loads (a changed prefix)
  size_t items_started = 0;    // (query, tree path) loads begun
  size_t items_wasted = 0;     // of those, outside the query's final top-k
};

class RetrievalPipeline {
 public:
  // prefetch and plan: for speculation (opt.slice > 0); may be null / empty otherwise.
  RetrievalPipeline(const ContextRetriever& retriever, const std::vector<Query>& queries, RetrievalPipelineOptions opt,
                    TurnLock* backend_turn, KvPrefetcher* prefetch, LoadPlan plan);
  ~RetrievalPipeline();  // stops the worker after the query it is retrieving
  RetrievalPipeline(const RetrievalPipeline&) = delete;
  RetrievalPipeline& operator=(const RetrievalPipeline&) = delete;

  // Without background: retrieves every query now, on this thread; progress() after each.
  void run_all(const std::function<void()>& progress = {});
  bool ready(size_t i) const;
  // Query i's context, waiting for it if need be (the time is added to waited_ms); rethrows what
  // its retrieval threw (an unknown passage, a missing embedder).
  const RagContext& wait(size_t i);
  double waited_ms() const { return waited_ms_; }
  RetrievalStats stats() const;

 private:
  void retrieve(size_t i);
  void work();

  const ContextRetriever& retriever_;
  const std::vector<Query>& queries_;
  RetrievalPipelineOptions opt_;
  TurnLock* backend_turn_;
  KvPrefetcher* prefetch_;
  LoadPlan plan_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<RagContext>> contexts_;
  std::vector<std::exception_ptr> errors_;
  size_t retrieved_ = 0;  // queries [0, retrieved_) are done
  bool quit_ = false;
  RetrievalStats stats_;
  double waited_ms_ = 0;
  std::thread worker_;
};

}  // namespace ragkv
