// RetrievalPipeline: one worker retrieving in input order, speculative loads per staged snapshot.
#include "core/rag/retrieval-pipeline.h"

#include <chrono>

#include "core/rag/speculation.h"
#include "core/util/error.h"

namespace ragkv {

LoadPlan tree_load_plan(const CacheKeys& keys, const PromptFormat& format) {
  return [&keys, &format](const std::vector<const Chunk*>& chunks) {
    std::vector<std::pair<std::string, std::vector<ChunkKvMeta>>> out;
    const RagPrompt prompt = format.build(chunks, "");
    std::vector<std::string> chain;
    std::string name = kPrefixChunkId;
    for (const PromptSegment& seg : prompt.segments) {
      if (seg.kind != PromptSegment::Kind::chunk) continue;
      name += '/';
      name += seg.chunk_id;
      std::vector<ChunkKvMeta> candidates;
      if (!chain.empty()) candidates.push_back(keys.chain_node(seg, chain));
      candidates.push_back(keys.segment(seg));
      out.emplace_back(name, std::move(candidates));
      chain.push_back(seg.chunk_id);
    }
    return out;
  };
}

RetrievalPipeline::RetrievalPipeline(const ContextRetriever& retriever, const std::vector<Query>& queries,
                                     RetrievalPipelineOptions opt, TurnLock* backend_turn, KvPrefetcher* prefetch,
                                     LoadPlan plan)
    : retriever_(retriever),
      queries_(queries),
      opt_(opt),
      backend_turn_(backend_turn),
      prefetch_(prefetch),
      plan_(std::move(plan)),
      contexts_(queries.size()),
      errors_(queries.size()) {
  if (opt_.slice > 0 && (!prefetch_ || !plan_)) opt_.slice = 0;  // nothing to speculate with
  if (opt_.background) worker_ = std::thread([this] { work(); });
}

RetrievalPipeline::~RetrievalPipeline() {
  {
    std::lock_guard l(mu_);
    quit_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

void RetrievalPipeline::retrieve(size_t i) {
  const Query& q = queries_[i];
  SearchOptions so;
  so.backend_turn = opt_.background ? backend_turn_ : nullptr;
  SpeculativeLoads spec;
  std::vector<std::pair<std::string, std::vector<ChunkKvMeta>>> loads;
  auto speculate = [&](const std::vector<const Chunk*>& top) {
    loads = plan_(top);
    std::vector<std::string> items;
    for (const auto& l : loads) items.push_back(l.first);
    const SpeculativeLoads::Change c = spec.update(items);
    for (const std::string& s : c.stop) prefetch_->unwant(s);
    for (size_t p : c.start) prefetch_->want(loads[p].first, loads[p].second);
  };
  if (opt_.slice > 0) {
    so.slice = opt_.slice;
    so.on_change = speculate;
  }
  std::optional<RagContext> ctx;
  std::exception_ptr error;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ctx = retriever_.context_for(q, so);
    if (opt_.slice > 0 && !ctx->pinned) {  // run_staged_search reports the final top-k last
      std::vector<std::string> final_items;
      for (const auto& l : plan_(ctx->chunks)) final_items.push_back(l.first);
      if (spec.current() != final_items) fail("internal: the speculation did not end on the final top-k of query {}", q.id);
    }
  } catch (...) {
    ctx.reset();
    error = std::current_exception();
  }
  const double total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard l(mu_);
  if (ctx && !ctx->pinned) {
    ++stats_.searched;
    stats_.search_ms += ctx->retrieval_ms;
    stats_.embed_ms += ctx->embed_ms;
    stats_.hnsw_ms += ctx->search_ms;
    stats_.turn_wait_ms += std::max(0.0, total_ms - ctx->retrieval_ms - ctx->on_change_ms);
    stats_.speculate_ms += ctx->on_change_ms;
    stats_.speculations += spec.speculations();
    stats_.restarts += spec.restarts();
    stats_.items_started += spec.started();
    stats_.items_wasted += spec.wasted().size();
  }
  contexts_[i] = std::move(ctx);
  errors_[i] = error;
  retrieved_ = i + 1;
  cv_.notify_all();
}

void RetrievalPipeline::work() {
  for (size_t i = 0; i < queries_.size(); ++i) {
    {
      std::lock_guard l(mu_);
      if (quit_) return;
    }
    retrieve(i);
  }
}

void RetrievalPipeline::run_all(const std::function<void()>& progress) {
  if (opt_.background) fail("internal: run_all on a background retrieval pipeline");
  for (size_t i = retrieved_; i < queries_.size(); ++i) {
    retrieve(i);
    if (progress) progress();
  }
}

bool RetrievalPipeline::ready(size_t i) const {
  std::lock_guard l(mu_);
  return i < retrieved_;
}

const RagContext& RetrievalPipeline::wait(size_t i) {
  if (i >= queries_.size()) fail("internal: query {} of {} asked of the retrieval pipeline", i, queries_.size());
  std::unique_lock l(mu_);
  if (i >= retrieved_) {
    if (!opt_.background) fail("internal: query {} was not retrieved (run_all first)", i);
    const auto t0 = std::chrono::steady_clock::now();
    cv_.wait(l, [&] { return i < retrieved_; });
    waited_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  if (errors_[i]) std::rethrow_exception(errors_[i]);
  return *contexts_[i];
}

RetrievalStats RetrievalPipeline::stats() const {
  std::lock_guard l(mu_);
  return stats_;
}

}  // namespace ragkv
