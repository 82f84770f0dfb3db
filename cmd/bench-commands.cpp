// bench prefill, bench reuse, bench retrieval, bench cache, bench device (DESIGN.md §8): JSON on stdout, progress on stderr.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cache-trace.h"
#include "bench/prefill-bench.h"
#include "bench/retrieval-bench.h"
#include "bench/reuse-bench.h"
#include "cmd/command-family.h"
#include "cmd/flag-table.h"
#include "core/kv/cache-policy.h"
#include "core/model/embedder.h"
#include "core/model/model.h"
#include "core/rag/cache-keys.h"
#include "core/rag/context.h"
#include "core/rag/cost-profile.h"
#include "core/rag/mode-spec.h"
#include "core/rag/prompt.h"
#include "core/rag/queries.h"
#include "core/util/paths.h"
#include "retrieval/index-dir.h"
#ifdef RAGKV_HAVE_CUDA
#include "cuda/cuda-backend.h"
#include "cuda/device-limits.h"
#endif

namespace ragkv::cli {

namespace {

class BenchCommands : public CommandFamily {
 public:
  explicit BenchCommands(CliOptions& o) : o_(o) {}

  void add_to(CLI::App& app) override {
    bench_ = app.add_subcommand("bench", "Benchmarks (JSON on stdout)");
    bench_->require_subcommand(1);
    prefill_cmd_ = bench_->add_subcommand("prefill", "Prefill and decode tokens/s per model");
    add_flags(prefill_cmd_, kBenchPrefill, o_);
    reuse_cmd_ = bench_->add_subcommand("reuse", "TTFT per reuse mode and chunk-KV tier, side by side with full");
    add_flags(reuse_cmd_, kBenchReuse, o_);
    retrieval_cmd_ = bench_->add_subcommand("retrieval", "Recall, gold hit rate, latency and staged-search convergence");
    add_flags(retrieval_cmd_, kBenchRetrieval, o_);
    cache_cmd_ = bench_->add_subcommand("cache", "RAGCache's cache manager replayed over a query file's retrieval trace: hit rate, computed tokens, estimated TTFT");
    add_flags(cache_cmd_, kBenchCache, o_);
    device_cmd_ = bench_->add_subcommand("device", "The GPU's reachable limits: cuBLAS GEMM TFLOP/s (8192³, f16 and bf16) and device-memory copy GB/s");
    add_flags(device_cmd_, kBenchDevice, o_);
  }

  bool selected() const override { return static_cast<bool>(*bench_); }

  int run() override {
    if (*prefill_cmd_) run_prefill();
    if (*reuse_cmd_) run_reuse();
    if (*retrieval_cmd_) run_retrieval();
    if (*cache_cmd_) run_cache();
    if (*device_cmd_) run_device();
    return 0;
  }


 private:
  void run_prefill() {
    const std::vector<std::string> models = o_.models.empty() ? std::vector<std::string>{default_llm_path(), gemma_llm_path()} : o_.models;
    auto backend = o_.dev.make_backend();
    PrefillBenchOptions opt = o_.prefill;
    opt.threads = o_.dev.thread_count();
    opt.repetitions = o_.repetitions;
    nlohmann::json results = nlohmann::json::array();
    for (const auto& m : models) {
      opt.model_path = m;
      results.push_back(bench_prefill(*backend, opt));
      std::fprintf(stderr, "ragkv bench: %s done\n", m.c_str());
    }
    std::cout << nlohmann::json{{"bench", "prefill"}, {"results", results}}.dump(2) << "\n";
  }

  void run_reuse() {
    ReuseBenchOptions opt;
    opt.model_path = o_.model;
    auto backend = o_.dev.make_backend();
    opt.threads = o_.dev.thread_count();
    opt.chunks = o_.chunks;
    opt.chunk_tokens = o_.chunk_tokens.value_or(opt.chunk_tokens);
    opt.blend.recompute_ratio = o_.defaults.recompute_ratio;
    opt.blend.check_layers = o_.defaults.check_layers;
    opt.repetitions = o_.repetitions;
    opt.store_dir = o_.store;
    if (!o_.kv_bits.empty()) opt.kv_bits = o_.kv_bits;
    opt.load_control = o_.cache.load_control_for(*backend) == "on";
    if (o_.cache.load_control == "report") fail("bench reuse --load-control: on, off or auto (report is answer's)");
    opt.cost_profile = o_.cache.cost_profile;
    opt.modes.clear();
    for (const auto& m : o_.modes.empty() ? reuse_mode_names() : o_.modes) {
      opt.modes.push_back(parse_mode_spec(m));
      if (opt.modes.back().freq_order) fail("bench reuse --modes {}: '+freq' orders a query file's chunks (answer, eval), not one prompt's", m);
    }
    opt.tiers.clear();
    opt.remote = o_.remote;
    for (const auto& t : o_.tiers.empty() ? kv_start_names() : o_.tiers)
      if (!o_.tiers.empty() || t != "remote" || !o_.remote.empty()) opt.tiers.push_back(parse_kv_start(t));  // default: remote with --remote
    std::cout << bench_reuse(*backend, opt).dump(2) << "\n";
  }

  // The chip's limits that the GPU report quotes figures against (cuda/device-limits.h).
  void run_device() {
#ifdef RAGKV_HAVE_CUDA
    if (!cuda_device_present()) fail("bench device: no CUDA device is available on this machine");
    const DeviceLimits d = measure_device_limits(0, 8192, int64_t(2) << 30, o_.repetitions);
    std::cout << nlohmann::json{{"bench", "device"},
                                {"device", d.device},
                                {"gemm_size", d.gemm_size},
                                {"gemm_f16_f32out_tflops", d.gemm_f16_f32out_tflops},
                                {"gemm_bf16_tflops", d.gemm_bf16_tflops},
                                {"copy_bytes", d.copy_bytes},
                                {"copy_gb_s", d.copy_gb_s}}
                     .dump(2)
              << "\n";
#else
    fail("bench device: this ragkv was built without the CUDA backend (nvcc was not found)");
#endif
  }

  void run_retrieval() {
    auto backend = o_.dev.make_backend();
    Embedder embedder;
    embedder.load(o_.embedder, *backend);
    const IndexDir index = IndexDir::open(o_.index, embedder.fingerprint());
    RetrievalBenchOptions opt;
    opt.queries_path = o_.queries;
    opt.max_queries = o_.max_queries;
    opt.k = o_.k;
    std::cout << bench_retrieval(index, embedder, opt).dump(2) << "\n";
  }

  // The trace: every query's retrieved chunks and prompt length, then one replay per policy,
  // budget and order (bench/cache-trace.h).
  void run_cache() {
    auto backend = o_.dev.make_backend();
    QueryFile queries = load_queries(o_.queries, OnError::fail);
    if (o_.limit > 0 && queries.queries.size() > o_.limit) queries.queries.resize(o_.limit);
    Embedder embedder;
    embedder.load(o_.embedder, *backend);
    const IndexDir index = IndexDir::open(o_.index, embedder.fingerprint());
    const Model model(o_.model, *backend);
    const PromptFormat format(model);
    const ContextRetriever retriever(index, &embedder, o_.top_k);
    const CacheTrace trace = read_cache_trace(retriever, format, model.config(), queries.queries);
    bool measured = false;
    const PrefillCostModel cost = load_or_profile_prefill_cost(
        o_.cache.cost_profile, model, CacheKeys(model, format).model_fingerprint(), &measured);
    if (measured) std::fprintf(stderr, "ragkv bench: prefill cost profiled into %s\n", o_.cache.cost_profile.c_str());
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& order : o_.orders.empty() ? std::vector<std::string>{"input", "reorder", "freq", "reorder+freq"} : o_.orders)
      for (const std::string& policy : o_.policies.empty() ? cache_policy_names() : o_.policies)
        for (uint64_t budget : o_.host_budgets) {
          TraceConfig c = trace_config();
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
                                {"queries", o_.queries},
                                {"requests", trace.requests.size()},
                                {"distinct_chunks", trace.distinct_chunks},
                                {"top_k", o_.top_k},
                                {"prefix_tokens", trace.prefix_tokens},
                                {"bytes_per_token", trace.bytes_per_token},
                                {"reorder_window", o_.reorder_window},
                                {"ca_window", o_.ca_window},
                                {"promotion_threshold", o_.promotion_threshold},
                                {"cost_profile", cost.to_json()},
                                {"results", rows}}
                     .dump(2)
              << "\n";
  }

  TraceConfig trace_config() const {
    TraceConfig c;
    c.reorder_window = o_.reorder_window;
    c.ca_window = o_.ca_window;
    c.promotion_threshold = o_.promotion_threshold;
    return c;
  }

  CliOptions& o_;
  CLI::App *bench_ = nullptr, *prefill_cmd_ = nullptr, *reuse_cmd_ = nullptr, *retrieval_cmd_ = nullptr,
           *cache_cmd_ = nullptr, *device_cmd_ = nullptr;
};

}  // namespace

std::unique_ptr<CommandFamily> bench_commands(CliOptions& o) { return std::make_unique<BenchCommands>(o); }

}  // namespace ragkv::cli
