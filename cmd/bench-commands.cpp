// bench prefill, bench reuse, bench retrieval, bench cache (DESIGN.md §8): JSON on stdout, progress on stderr.
#include <cstdio>
#include <iostream>
#include <set>

#include <nlohmann/json.hpp>

#include "bench/cache-trace.h"
#include "bench/prefill-bench.h"
#include "bench/retrieval-bench.h"
#include "bench/reuse-bench.h"
#include "cmd/command-family.h"
#include "cmd/device-flags.h"
#include "cmd/mode-validator.h"
#include "core/kv/cache-policy.h"
#include "core/model/embedder.h"
#include "core/model/model.h"
#include "core/rag/cache-keys.h"
#include "core/rag/context.h"
#include "core/rag/cost-profile.h"
#include "core/rag/mode-spec.h"
#include "core/rag/plan.h"
#include "core/rag/prompt.h"
#include "core/rag/queries.h"
#include "core/rag/selection.h"
#include "retrieval/index-dir.h"
#include "core/util/paths.h"
#include "core/util/progress.h"

namespace ragkv::cli {

namespace {

class BenchCommands : public CommandFamily {
 public:
  void add_to(CLI::App& app) override {
    bench_ = app.add_subcommand("bench", "Benchmarks (JSON on stdout)");
    bench_->require_subcommand(1);

    prefill_cmd_ = bench_->add_subcommand("prefill", "Prefill and decode tokens/s per model");
    prefill_cmd_->add_option("--model", prefill_models_, "Models (default: the two default LLMs)");
    prefill_cmd_->add_option("--tokens", prefill_.prompt_tokens, "Prompt length")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    prefill_cmd_->add_option("--decode-tokens", prefill_.decode_tokens, "Tokens decoded after the prompt")->check(CLI::Range(1, 1 << 16))->capture_default_str();
    prefill_cmd_->add_option("--decode-batch", prefill_.decode_batch, "Sequences decoded together for decode_batch_tokens_per_s (1: skip)")->check(CLI::Range(1, 256))->capture_default_str();
    prefill_cmd_->add_option("--repetitions", prefill_.repetitions, "Timed prefills and decodes per model (medians reported)")->check(CLI::Range(1, 1000))->capture_default_str();
    prefill_dev_.add_to(prefill_cmd_);

    reuse_.blend.recompute_ratio = kDefaultRecomputeRatio;
    reuse_cmd_ = bench_->add_subcommand("reuse", "TTFT per reuse mode and chunk-KV tier, side by side with full");
    reuse_cmd_->add_option("--model", reuse_.model_path, "Model (default: the default LLM)");
    reuse_cmd_->add_option("--chunks", reuse_.chunks, "Chunks in the prompt")->check(CLI::Range(1, 1024))->capture_default_str();
    reuse_cmd_->add_option("--chunk-tokens", reuse_.chunk_tokens, "Tokens per chunk")->check(CLI::Range(1, 1 << 20))->capture_default_str();
    reuse_cmd_->add_option("--modes", reuse_modes_, "Modes, comma-separated, variants too (blend/prophet@0.2); full is always timed: ratios are taken against it")
        ->delimiter(',')->check(mode_validator())->capture_default_str();
    reuse_cmd_->add_option("--tiers", reuse_tiers_, "Where chunk KV starts: disk (page cache dropped), page-cache, host (in memory), device (in the backend's memory)")
        ->delimiter(',')->check(CLI::IsMember(kv_start_names()))->capture_default_str();
    reuse_cmd_->add_option("--recompute-ratio", reuse_.blend.recompute_ratio, "blend: fraction of reused tokens recomputed per layer")->check(CLI::Range(0.0, 1.0))->capture_default_str();
    reuse_cmd_->add_option("--select", reuse_.select, "blend: how tokens to recompute are chosen (auto: the model architecture's default)")->check(CLI::IsMember(selection_choices()))->capture_default_str();
    reuse_cmd_->add_option("--check-layers", reuse_.blend.check_layers, "blend: HKVD selection layers (gradual filtering)")->check(CLI::Range(1, 1024))->capture_default_str();
    reuse_cmd_->add_option("--repetitions", reuse_.repetitions, "Timed prefills per mode and tier, after a warm-up")->check(CLI::Range(1, 1000))->capture_default_str();
    reuse_cmd_->add_option("--store", reuse_.store_dir, "Store for the chunk caches (default: a temporary one, removed afterwards)");
    reuse_cmd_->add_option("--kv-bits", reuse_.kv_bits, "KV encodings of the chunk caches, comma-separated (16: f16, 8, 4: quantised as precompute --kv-bits): one store each, every cached mode and tier timed on each")->delimiter(',')->check(CLI::IsMember({16, 8, 4}))->capture_default_str();
    reuse_dev_.add_to(reuse_cmd_);

    retrieval_cmd_ = bench_->add_subcommand("retrieval", "Recall, gold hit rate, latency and staged-search convergence");
    retrieval_embedder_ = default_embedder_dir();
    retrieval_cmd_->add_option("--index", retrieval_index_, "Index directory")->required();
    retrieval_cmd_->add_option("--queries", retrieval_.queries_path, "Queries JSONL with gold_passages")->required();
    retrieval_cmd_->add_option("--max-queries", retrieval_.max_queries, "Queries to run")->check(CLI::Range(1, 1 << 24))->capture_default_str();
    retrieval_cmd_->add_option("-k", retrieval_.k, "Hit rate at k")->check(CLI::Range(1, 1000))->capture_default_str();
    retrieval_cmd_->add_option("--embedder", retrieval_embedder_, "Sentence-embedder directory")->capture_default_str();
    retrieval_dev_.add_to(retrieval_cmd_);

    cache_cmd_ = bench_->add_subcommand("cache", "RAGCache's cache manager replayed over a query file's retrieval trace (no KV computed): hit rate, computed tokens and estimated TTFT per policy, host budget and order");
    cache_cmd_->add_option("QUERIES", cache_queries_, "Queries JSONL (searched, or their passages)")->required();
    cache_cmd_->add_option("--index", cache_index_, "Index directory")->required();
    cache_model_ = default_llm_path();
    cache_cmd_->add_option("--model", cache_model_, "LLM (its tokenizer, KV size and prefill cost)")->capture_default_str();
    cache_embedder_ = default_embedder_dir();
    cache_cmd_->add_option("--embedder", cache_embedder_, "Sentence-embedder directory")->capture_default_str();
    cache_cmd_->add_option("--top-k", cache_top_k_, "Chunks retrieved per question")->check(CLI::Range(1, 1000))->capture_default_str();
    cache_cmd_->add_option("--limit", cache_limit_, "Only the first N queries (0: all)")->check(CLI::NonNegativeNumber);
    cache_cmd_->add_option("--host-budgets", cache_budgets_, "Host-memory budgets to replay, comma-separated (e.g. 64MiB,256MiB,1GiB)")->delimiter(',')->transform(CLI::AsSizeValue(false))->required();
    cache_cmd_->add_option("--policies", cache_policies_, "Replacement policies, comma-separated")->delimiter(',')->check(CLI::IsMember(cache_policy_names()))->capture_default_str();
    cache_cmd_->add_option("--orders", cache_orders_, "Orders, comma-separated: input (--no-reorder), reorder (answer's default), freq (input order, --chunk-order freq), reorder+freq")->delimiter(',')->check(CLI::IsMember({"input", "reorder", "freq", "reorder+freq"}))->capture_default_str();
    cache_cmd_->add_option("--reorder-window", cache_.reorder_window, "As answer's --reorder-window")->check(CLI::NonNegativeNumber)->capture_default_str();
    cache_cmd_->add_option("--ca-window", cache_.ca_window, "As answer's --ca-window")->check(CLI::Range(size_t(1), size_t(1) << 40))->capture_default_str();
    cache_cmd_->add_option("--promotion-threshold", cache_.promotion_threshold, "As answer's --promotion-threshold")->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
    cache_cmd_->add_option("--cost-profile", cache_cost_profile_, "The prefill cost profile T(cached, computed) (answer's --cost-profile): read, or measured now and written there")->required();
    cache_dev_.add_to(cache_cmd_);
  }

  bool selected() const override { return static_cast<bool>(*bench_); }

  int run() override {
    if (*prefill_cmd_) run_prefill();
    if (*reuse_cmd_) run_reuse();
    if (*retrieval_cmd_) run_retrieval();
    if (*cache_cmd_) run_cache();
    return 0;
  }

 private:
  void run_prefill() {
    if (prefill_models_.empty()) prefill_models_ = {default_llm_path(), gemma_llm_path()};
    auto backend = prefill_dev_.make_backend();
    prefill_.threads = prefill_dev_.thread_count();
    nlohmann::json results = nlohmann::json::array();
    for (const auto& m : prefill_models_) {
      prefill_.model_path = m;
      results.push_back(bench_prefill(*backend, prefill_));
      std::fprintf(stderr, "ragkv bench: %s done\n", m.c_str());
    }
    std::cout << nlohmann::json{{"bench", "prefill"}, {"results", results}}.dump(2) << "\n";
  }

  void run_reuse() {
    if (reuse_.model_path.empty()) reuse_.model_path = default_llm_path();
    auto backend = reuse_dev_.make_backend();
    reuse_.threads = reuse_dev_.thread_count();
    reuse_.modes.clear();
    for (const auto& m : reuse_modes_) {
      reuse_.modes.push_back(parse_mode_spec(m));
      if (reuse_.modes.back().freq_order) fail("bench reuse --modes {}: '+freq' orders a query file's chunks (answer, eval), not one prompt's", m);
    }
    reuse_.tiers.clear();
    for (const auto& t : reuse_tiers_) reuse_.tiers.push_back(parse_kv_start(t));
    std::cout << bench_reuse(*backend, reuse_).dump(2) << "\n";
  }

  void run_retrieval() {
    auto backend = retrieval_dev_.make_backend();
    Embedder embedder;
    embedder.load(retrieval_embedder_, *backend);
    const IndexDir index = IndexDir::open(retrieval_index_, embedder.fingerprint());
    std::cout << bench_retrieval(index, embedder, retrieval_).dump(2) << "\n";
  }

  // The trace: every query's retrieved chunks and prompt length, then one replay per policy,
  // budget and order (bench/cache-trace.h).
  void run_cache() {
    auto backend = cache_dev_.make_backend();
    QueryFile queries = load_queries(cache_queries_, OnError::fail);
    if (cache_limit_ > 0 && queries.queries.size() > cache_limit_) queries.queries.resize(cache_limit_);
    Embedder embedder;
    embedder.load(cache_embedder_, *backend);
    const IndexDir index = IndexDir::open(cache_index_, embedder.fingerprint());
    const Model model(cache_model_, *backend);
    const PromptFormat format(model);
    const ContextRetriever retriever(index, &embedder, cache_top_k_);
    const ModelConfig& cfg = model.config();
    CacheTrace trace;
    trace.prefix_tokens = int64_t(format.prefix_ids().size());
    trace.bytes_per_token = uint64_t(cfg.n_layer) * cfg.kv_dim() * 2 * sizeof(uint16_t);
    std::set<std::string> distinct;
    {
      Progress bar("bench cache: retrieve", int64_t(queries.queries.size()), "queries");
      for (const Query& q : queries.queries) {
        const RagContext ctx = retriever.context_for(q);
        const RagPrompt prompt = format.build(ctx.chunks, q.question);
        TraceRequest r;
        for (const PromptSegment& seg : prompt.segments)
          if (seg.kind == PromptSegment::Kind::chunk) {
            r.chunks.push_back(seg.chunk_id);
            r.chunk_tokens.push_back(int64_t(seg.ids.size()));
            distinct.insert(seg.chunk_id);
          }
        r.prompt_tokens = prompt.n_tokens();
        trace.requests.push_back(std::move(r));
        bar.add();
      }
      bar.finish();
    }
    bool measured = false;
    const PrefillCostModel cost = load_or_profile_prefill_cost(
        cache_cost_profile_, model, CacheKeys(model, format).model_fingerprint(), &measured);
    if (measured) std::fprintf(stderr, "ragkv bench: prefill cost profiled into %s\n", cache_cost_profile_.c_str());
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& order : cache_orders_)
      for (const std::string& policy : cache_policies_)
        for (uint64_t budget : cache_budgets_) {
          TraceConfig c = cache_;
          c.policy = parse_cache_policy(policy);
          c.host_bytes = budget;
          c.reorder = order.starts_with("reorder");
          c.freq_order = order.ends_with("freq");
          nlohmann::json row = replay_cache_trace(trace, cost, c).to_json();
          row["order"] = order;
          row["policy"] = policy;
          row["host_budget_bytes"] = budget;
          rows.push_back(std::move(row));
          std::fprintf(stderr, "ragkv bench: cache %s %s %llu bytes: hit rate %.3f\n", order.c_str(), policy.c_str(),
                       static_cast<unsigned long long>(budget), rows.back()["hit_rate"].get<double>());
        }
    std::cout << nlohmann::json{{"bench", "cache"},
                                {"queries", cache_queries_},
                                {"requests", trace.requests.size()},
                                {"distinct_chunks", distinct.size()},
                                {"top_k", cache_top_k_},
                                {"prefix_tokens", trace.prefix_tokens},
                                {"bytes_per_token", trace.bytes_per_token},
                                {"reorder_window", cache_.reorder_window},
                                {"ca_window", cache_.ca_window},
                                {"promotion_threshold", cache_.promotion_threshold},
                                {"cost_profile", cost.to_json()},
                                {"results", rows}}
                     .dump(2)
              << "\n";
  }

  CLI::App *bench_ = nullptr, *prefill_cmd_ = nullptr, *reuse_cmd_ = nullptr, *retrieval_cmd_ = nullptr,
           *cache_cmd_ = nullptr;
  std::string cache_queries_, cache_index_, cache_model_, cache_embedder_, cache_cost_profile_;
  size_t cache_top_k_ = 5, cache_limit_ = 0;
  std::vector<uint64_t> cache_budgets_;
  std::vector<std::string> cache_policies_ = cache_policy_names();
  std::vector<std::string> cache_orders_{"input", "reorder", "freq", "reorder+freq"};
  TraceConfig cache_;
  DeviceFlags cache_dev_;
  std::vector<std::string> prefill_models_;
  PrefillBenchOptions prefill_;
  DeviceFlags prefill_dev_;
  ReuseBenchOptions reuse_;
  std::vector<std::string> reuse_modes_ = reuse_mode_names();
  std::vector<std::string> reuse_tiers_ = kv_start_names();
  DeviceFlags reuse_dev_;
  RetrievalBenchOptions retrieval_;
  std::string retrieval_index_, retrieval_embedder_;
  DeviceFlags retrieval_dev_;
};

}  // namespace

std::unique_ptr<CommandFamily> bench_commands() { return std::make_unique<BenchCommands>(); }

}  // namespace ragkv::cli
