// bench prefill, bench reuse, bench retrieval (DESIGN.md §8): JSON on stdout, progress on stderr.
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bench/prefill-bench.h"
#include "bench/retrieval-bench.h"
#include "bench/reuse-bench.h"
#include "cmd/command-family.h"
#include "cmd/device-flags.h"
#include "cmd/mode-validator.h"
#include "rag/mode-spec.h"
#include "rag/plan.h"
#include "rag/selection.h"
#include "model/embedder.h"
#include "retrieval/index-dir.h"
#include "util/paths.h"

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
    prefill_cmd_->add_option("--repetitions", prefill_.repetitions, "Timed prefills per model")->check(CLI::Range(1, 1000))->capture_default_str();
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
  }

  bool selected() const override { return static_cast<bool>(*bench_); }

  int run() override {
    if (*prefill_cmd_) run_prefill();
    if (*reuse_cmd_) run_reuse();
    if (*retrieval_cmd_) run_retrieval();
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
    for (const auto& m : reuse_modes_) reuse_.modes.push_back(parse_mode_spec(m));
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

  CLI::App *bench_ = nullptr, *prefill_cmd_ = nullptr, *reuse_cmd_ = nullptr, *retrieval_cmd_ = nullptr;
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
