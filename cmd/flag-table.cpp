// The engine's flags (inputs, retrieval, model and device, modes, generation, store and tiers,
// scheduling, gate), and add_flags, which declares a subcommand's flags from the whole table.
#include "cmd/flag-table.h"

#include "cmd/help-groups.h"
#include "cmd/mode-validator.h"
#include "core/kv/cache-policy.h"
#include "core/rag/queries.h"

namespace ragkv::cli {

namespace {

using G = FlagGroup;
constexpr uint32_t kRag = kAnswer | kEval;
constexpr uint32_t kQueryRuns = kPrecompute | kAnswer | kEval | kBenchCache;

const char* group_name(FlagGroup g) {
  switch (g) {
    case G::inputs: return "Inputs and outputs";
    case G::retrieval: return "Retrieval";
    case G::model_device: return "Model and device";
    case G::modes: return "Modes";
    case G::generation: return "Generation";
    case G::store_tiers: return "Store and tiers";
    case G::scheduling: return "Scheduling";
    case G::gate: return "Gate";
    case G::index: return "Index";
    case G::bench: return "Benchmark";
    case G::test_model: return "Test model";
  }
  return "Options";
}


// Inputs and outputs.
std::vector<Flag> input_flags() {
  return {
      {kAnswer | kEval | kBenchCache, kAnswer | kEval | kBenchCache, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("QUERIES", o.queries, "Queries JSONL, one {id, question, answers?, passages?} per line");
       }},
      {kPrecompute | kBenchRetrieval | kMerge, kBenchRetrieval | kMerge, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--queries", o.queries, "Queries JSONL: precompute only the chunks they use; bench retrieval: the queries with gold_passages; merge: the order and the completeness check");
       }},
      {kMerge, kMerge, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("SHARDS", o.shard_files, "The shards' answer files (answer --out) or eval records (eval --answers)");
       }},
      {kQueryRuns | kSearch | kBenchRetrieval | kStoreRepair, kQueryRuns | kSearch | kBenchRetrieval, 0, G::inputs,
       [](CLI::App* a, CliOptions& o) { return a->add_option("--index", o.index, "Index directory written by build-index"); }},
      {kPrecompute | kAnswer | kEval | kBenchReuse | kStoreVerify | kStoreRepair | kStoreStats | kStoreGc,
       kPrecompute | kEval | kStoreVerify | kStoreRepair | kStoreStats | kStoreGc, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--store", o.store, "Chunk-cache store directory (answer: without one every answer is computed in full)");
       }},
      {kBuildIndex | kAnswer | kMakeTestModel | kMerge, kBuildIndex | kMakeTestModel, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--out", o.out, "Where to write the index directory, the answers JSONL (default: stdout) or the GGUF");
       }},
      {kAnswer, 0, kAnswer, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--summary", o.summary, "Also write the run's summary JSON to this file");
       }},
      {kEval, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--report", o.report, "Report file: Markdown when it ends in .md, else JSON");
       }},
      {kEval, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--junit", o.junit, "Write the gate's checks as JUnit XML to this file");
       }},
      {kEval, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--answers", o.answers, "Write every mode's answers per query to this JSONL file");
       }},
      {kAnswer | kEval, 0, kAnswer, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--resume", o.resume, "Keep the queries already answered in --out (answer) or --answers (eval), finished or interrupted, and answer the rest");
       }},
      {kBuildIndex | kAnswer | kEval, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--on-error", o.on_error, "Bad input lines and unanswerable queries: fail, or skip and count them")
             ->check(CLI::IsMember(on_error_names()))->capture_default_str();
       }},
      {kQueryRuns, 0, 0, G::inputs, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--limit", o.limit, "Only the first N queries (precompute: chunks); 0: all")->check(CLI::NonNegativeNumber);
       }},
  };
}

// Retrieval.
std::vector<Flag> retrieval_flags() {
  return {
      {kQueryRuns, 0, 0, G::retrieval, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--top-k", o.top_k, "Chunks retrieved per question")->check(CLI::Range(1, 1000))->capture_default_str();
       }},
      {kBuildIndex | kSearch | kQueryRuns | kBenchRetrieval, 0, 0, G::retrieval, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--embedder", o.embedder, "Sentence-embedder directory")->capture_default_str();
       }},
  };
}

// Model and device.
std::vector<Flag> model_device_flags() {
  return {
      {kGenerate | kTokenize | kBuildIndex | kQueryRuns | kBenchReuse | kStoreRepair | kStoreGc | kDeviceCheck, 0, 0, G::model_device,
       [](CLI::App* a, CliOptions& o) { return a->add_option("--model", o.model, "LLM in GGUF format")->capture_default_str(); }},
      {kComputing, 0, 0, G::model_device, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--device", o.dev.device, "Compute device: cpu, cuda, or auto (cuda when a GPU is present and `ragkv device-check` passed on it)")
             ->check(CLI::IsMember({"cpu", "cuda", "auto"}))->capture_default_str();
       }},
      {kComputing | kMakeTestModel | kDeviceCheck, 0, 0, G::model_device, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--threads", o.dev.threads, "CPU threads (0: one per core)")->check(CLI::NonNegativeNumber);
       }},
  };
}

// Modes.
std::vector<Flag> mode_flags() {
  return {
      {kAnswer, 0, 0, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--mode", o.mode, "full, prefix, reuse, blend, craft or auto, as MODE[/METHOD][@R][~P][+freq] (default: auto with a store, else full)")
             ->check(mode_validator());
       }},
      {kAnswer, 0, kAnswer, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--require", o.require, "exact: never compose, reuse only exact prefixes and compute the rest, for output identical to full's")
             ->check(CLI::IsMember({"exact"}));
       }},
      {kAnswer, 0, kAnswer, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--fallback-margin", o.fallback_margin, "M[/C]: recompute a composed prompt after its exact prefix (full's answer) when its first step's top-2 probability gap is below M, or below C where the repair moved the first token (0: never; default: auto takes the store's fitted rule, eval --fit-fallback, else 0.003/0.02)")
             ->check(fallback_rule_validator());
       }},
      {kEval, 0, kEval, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--fallback-margins", o.fallback_margins, "Also report each mode as answer --fallback-margin M[/C] would run it, for each rule, derived from the records")
             ->delimiter(',')->check(fallback_rule_validator());
       }},
      {kAnswer, 0, 0, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--compare", o.compare, "Also answer in this mode (e.g. full) and score each answer against it")->check(mode_validator());
       }},
      {kEval | kBenchReuse, 0, 0, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--modes", o.modes, "Modes, comma-separated, each MODE[/METHOD][@R][~P][+freq] (default: eval blend; bench reuse every mode)")
             ->delimiter(',')->check(mode_validator());
       }},
      {kEval, 0, 0, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--baseline", o.baseline, "Baseline mode")->check(mode_validator())->capture_default_str();
       }},
      {kRag | kBenchReuse, 0, 0, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--recompute-ratio", o.defaults.recompute_ratio, "Fraction of reused tokens blend recomputes per layer, where the mode names no @R")
             ->check(CLI::Range(0.0, 1.0))->capture_default_str();
       }},
      {kEval, 0, kEval, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--sweep", o.sweep, "Run each blend mode without @R at each of these ratios, and each craft mode without @ALPHA at each as alpha")
             ->delimiter(',')->check(CLI::Range(0.0, 1.0));
       }},
      {kRag | kBenchReuse, 0, kRag | kBenchReuse, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--check-layers", o.defaults.check_layers, "blend: layers 1..N that select the tokens to recompute by gradual filtering")
             ->check(CLI::Range(1, 1024))->capture_default_str();
       }},
      {kRag, 0, kRag, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--check-at", o.defaults.check_at, "blend: explicit check layers, ascending, comma-separated, instead of 1..N")
             ->delimiter(',')->check(CLI::Range(1, 1 << 16));
       }},
      {kRag, 0, kRag, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--sink-tokens", o.defaults.sink_tokens, "blend sink methods: first tokens per chunk recomputed (0: ceil(r x chunk) for sink, 4 with +v)")
             ->check(CLI::Range(0, 1 << 20))->capture_default_str();
       }},
      {kRag, 0, kRag, G::modes, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--focus-window", o.defaults.focus_window, "craft: layers the focused chunks must hold before the others stop being recomputed (Cache-Craft Algorithm 1's w; 0: never)")
             ->check(CLI::Range(0, 1024))->capture_default_str();
       }},
  };
}

// Generation.
std::vector<Flag> generation_flags() {
  return {
      {kGenerate, kGenerate, 0, G::generation, [](CLI::App* a, CliOptions& o) { return a->add_option("--prompt", o.prompt, "Prompt text"); }},
      {kGenerate | kRag, 0, 0, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--max-tokens", o.defaults.max_tokens, "Maximum new tokens")->check(CLI::Range(1, 1 << 20))->capture_default_str();
       }},
      {kGenerate | kAnswer, 0, 0, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--temperature", o.sampling.temperature, "Sampling temperature (0: greedy)")->check(CLI::Range(0.0, 100.0))->capture_default_str();
       }},
      {kGenerate | kAnswer, 0, kAnswer, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--top-p", o.sampling.top_p, "Sample from the most likely tokens holding this much probability")
             ->check(CLI::Range(0.0, 1.0))->capture_default_str();
       }},
      {kGenerate | kAnswer | kMakeTestModel, 0, 0, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--seed", o.seed, "Random seed: the sampler's (default 0) or make-test-model's weights' (default 42)");
       }},
      {kGenerate | kAnswer, 0, kAnswer, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--stop", o.sampling.stop, "Stop once the text contains this string (repeatable); the text ends before it");
       }},
      {kGenerate, 0, 0, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--chat", o.chat, "Wrap the prompt in the model's chat template (one user turn)");
       }},
      {kGenerate, 0, 0, G::generation, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--json", o.json, "Print one JSON object instead of streaming text");
       }},
  };
}

// The KV tiers between queries and their budgets.
std::vector<Flag> tier_flags() {
  return {
      {kAnswer, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--host-budget", o.cache.host_bytes, "Bytes of chunk KV kept in host memory between queries (default: a quarter of the free memory, at most 8GiB)")
             ->transform(CLI::AsSizeValue(false));
       }},
      {kAnswer, 0, kAnswer, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--device-budget", o.cache.device_bytes, "Bytes of chunk KV kept in device memory between queries (default: 0 on the CPU, 1GiB on a GPU)")
             ->transform(CLI::AsSizeValue(false));
       }},
      {kAnswer, 0, kAnswer, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--disk-budget", o.cache.disk_bytes, "Bytes of knowledge-tree chain nodes kept in the store (default 0: none written)")
             ->transform(CLI::AsSizeValue(false));
       }},
      {kAnswer, 0, kAnswer, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--cache-policy", o.cache.policy, "Replacement policy of the tiers: pgdsf (RAGCache), gdsf or lru")
             ->check(CLI::IsMember(cache_policy_names()))->capture_default_str();
       }},
      {kAnswer | kBenchCache | kBenchReuse, kBenchCache, kAnswer | kBenchReuse, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--cost-profile", o.cache.cost_profile, "File of the measured prefill cost and tier read rates: read when it fits this model and device, else measured and written");
       }},
      {kAnswer | kBenchReuse, 0, kAnswer, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--load-control", o.cache.load_control, "Loading controller (CacheBlend §5, Cache-Craft Eq. 16): auto (on with a GPU, off on the CPU), off, report (decide and report only) or on")
             ->check(CLI::IsMember({"auto", "off", "report", "on"}))->capture_default_str();
       }},
      {kAnswer, 0, kAnswer, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--raise-ratio", o.cache.raise_ratio, "With --load-control on: raise blend's ratio to the most that still hides under loading (CacheBlend §5.1)");
       }},
      {kRag, 0, kRag, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--read-only", o.read_only, "Never write the store (a warmed store mounted read-only by many serving nodes): no variant uses, write-back, chain nodes or alpha fit");
       }},
      {kAnswer, 0, kAnswer, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--write-back", o.write_back, "Store each chunk a prompt computes as the Cache-Craft variant of the chunks before it, within the variant budget");
       }},
  };
}

// The store's caches, variants and sharing (same help group as the tiers).
std::vector<Flag> store_flags() {
  return {
      {kPrecompute | kBenchReuse, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--kv-bits", o.kv_bits, "KV encoding of the chunk caches: 16 (f16), 8 or 4 bits (precompute: one, default the store's own; bench reuse: a list, default 16)")
             ->delimiter(',')->check(CLI::IsMember({16, 8, 4}));
       }},
      {kPrecompute, 0, 0, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--neighbours", o.neighbours, "Cache-Craft variants: each chunk also computed after its N most similar chunks (0: none)")
             ->check(CLI::Range(0, 16))->capture_default_str();
       }},
      {kPrecompute, 0, kPrecompute, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--donor-reuse", o.donor_reuse, "After build-index --update: build a changed chunk's cache from its earlier version's (aligned tokens reused, the rest and a repair recomputed; stored as a donor cache) or (off) compute it whole")
             ->check(CLI::IsMember({"on", "off"}))->capture_default_str();
       }},
      {kPrecompute, 0, kPrecompute, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--donor-repair", o.donor_repair, "Donor reuse: share of the aligned tokens after an edit recomputed, chosen by KV deviation (0: only the changed tokens)")
             ->check(CLI::Range(0.0, 1.0))->capture_default_str();
       }},
      {kPrecompute, 0, kPrecompute, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--warmup", o.warmup, "Cache-Craft variants from these queries' prompts, as answer would retrieve them, instead of neighbours");
       }},
      {kPrecompute, 0, kPrecompute, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--max-variants", o.max_variants, "Cache-Craft budget: at most N variant files, kept in STORE/craft.json (0: no limit)")->check(CLI::NonNegativeNumber);
       }},
      {kPrecompute, 0, kPrecompute, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--variant-bytes", o.variant_bytes, "Cache-Craft budget: at most this many bytes of variant files, kept in STORE/craft.json (0: no limit)")
             ->check(CLI::NonNegativeNumber);
       }},
      {kPrecompute | kRag | kStoreVerify | kStoreRepair, 0, kPrecompute | kRag | kStoreVerify | kStoreRepair, G::store_tiers,
       [](CLI::App* a, CliOptions& o) {
         return a->add_option("--store-key", o.store_key, "Key file: sign every cache written with HMAC-SHA256 and reject every cache read that this key did not sign");
       }},
      {kPrecompute | kRag | kBenchReuse, 0, kPrecompute | kRag | kBenchReuse, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--remote", o.remote, "Redis tier below the store, redis://host[:port][/db]: precompute writes caches through to it; answer, eval read what the store lacks from it (every value checked); bench reuse: the remote tier's server");
       }},
      {kPrecompute | kRag, 0, kPrecompute | kRag, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--shard", o.shard, "Run only shard I/N (precompute: chunks by content key; answer, eval: queries by line, a conversation whole; default: from SLURM_ARRAY_TASK_ID/COUNT or JOB_COMPLETION_INDEX)");
       }},
      {kPrecompute | kRag, 0, kPrecompute | kRag, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--shard-count", o.shard_count, "Shards beside Kubernetes' JOB_COMPLETION_INDEX (or RAGKV_SHARD_COUNT)")->check(CLI::Range(size_t(1), size_t(1) << 20));
       }},
      {kPrecompute, 0, kPrecompute, G::store_tiers, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--claim-lease", o.claim_lease, "Seconds after which another process sharing the store may take over a claim this run stopped refreshing (at most 3600)")
             ->check(CLI::Range(0.1, 3600.0))->capture_default_str();
       }},
  };
}

// Scheduling.
std::vector<Flag> scheduling_flags() {
  return {
      {kRag, 0, 0, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--batch", o.batch, "Answers decoded together (continuous batching; the answers do not change)")
             ->check(CLI::Range(size_t(1), size_t(256)))->capture_default_str();
       }},
      {kAnswer, 0, kAnswer, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--no-reorder", o.no_reorder, "Answer in input order instead of cache-aware order (RAGCache §5.2)");
       }},
      {kAnswer | kBenchCache, 0, kAnswer | kBenchCache, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--reorder-window", o.reorder_window, "Reordering: queries among which the best-cached is answered next (0: the whole file)")
             ->check(CLI::NonNegativeNumber)->capture_default_str();
       }},
      {kAnswer | kBenchCache, 0, kAnswer | kBenchCache, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--ca-window", o.ca_window, "CRAFT's CA-Table: requests in its sliding window of chunk access counts")
             ->check(CLI::Range(size_t(1), size_t(1) << 40))->capture_default_str();
       }},
      {kAnswer | kBenchCache, 0, kAnswer | kBenchCache, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--promotion-threshold", o.promotion_threshold, "CRAFT's CP-Tree: retrievals in the CA-Table's window before a computed chunk prefix enters the tree (1: at once)")
             ->check(CLI::Range(int64_t(1), int64_t(1) << 40))->capture_default_str();
       }},
      {kAnswer, 0, kAnswer, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--pipeline", o.pipeline, "Retrieve in a worker thread ahead of answering, loading caches speculatively (RAGCache §5.3; slower on a CPU)");
       }},
      {kAnswer, 0, kAnswer, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--search-slice", o.search_slice, "With --pipeline: distance computations per search stage whose top-k starts loads (0: no speculation)")
             ->check(CLI::NonNegativeNumber)->capture_default_str();
       }},
      {kAnswer, 0, kAnswer, G::scheduling, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--no-dedup", o.no_dedup, "Conversations: keep chunks a later turn retrieves again (default: CRAFT's deduplication drops them)");
       }},
  };
}

// Gate.
std::vector<Flag> gate_flags() {
  return {
      {kEval, 0, 0, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--min-agreement", o.gate.min_agreement, "Lower 95 % bound of first-token agreement with the baseline at least this (0: off)")
             ->check(CLI::Range(0.0, 1.0))->capture_default_str();
       }},
      {kEval, 0, 0, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--max-kl", o.gate.max_kl, "Upper 95 % bound of first-token KL to the baseline at most this (negative: off)")->capture_default_str();
       }},
      {kEval, 0, 0, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--min-recovery", o.gate.min_recovery, "Lower 95 % bound of the recovery of reuse's damage at least this (negative: off)")->capture_default_str();
       }},
      {kEval, 0, kEval, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--min-quality-ratio", o.gate.min_quality_ratio, "Gold-F1 ratio to the baseline at least this (0: off)")
             ->check(CLI::Range(0.0, 10.0))->capture_default_str();
       }},
      {kEval, 0, kEval, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--fit-alpha", o.fit_alpha, "Store the smallest craft alpha that passes the gate in STORE/craft.json (Cache-Craft Eq. 13)");
       }},
      {kEval, 0, kEval, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_flag("--fit-fallback", o.fit_fallback, "Store in STORE/craft.json the --fallback-margins rule (or none) with which auto passes the gate at the least compute; answer's auto then uses it");
       }},
      {kEval, 0, kEval, G::gate, [](CLI::App* a, CliOptions& o) {
         return a->add_option("--baseline-cache", o.baseline_cache, "Keep the baseline's answers in this JSONL file and reuse them when binary, model and prompt match");
       }},
  };
}

}  // namespace

std::vector<Flag> engine_flags() {
  std::vector<Flag> all;
  for (auto part : {input_flags, retrieval_flags, model_device_flags, mode_flags, generation_flags, tier_flags, store_flags,
                    scheduling_flags, gate_flags})
    for (Flag& f : part()) all.push_back(std::move(f));
  return all;
}

void add_flags(CLI::App* sub, Cmd cmd, CliOptions& o) {
  std::vector<Flag> flags = engine_flags();
  for (Flag& f : tool_flags()) flags.push_back(std::move(f));
  bool any_advanced = false;
  for (const bool pass_advanced : {false, true})  // the advanced group after the others in --help-all
    for (const Flag& f : flags) {
      if (!(f.cmds & cmd) || bool(f.advanced & cmd) != pass_advanced) continue;
      CLI::Option* opt = f.add(sub, o);
      if (f.required & cmd) opt->required();
      if (pass_advanced)
        advanced(opt), any_advanced = true;
      else
        opt->group(group_name(f.group));
    }
  sub->footer(any_advanced && !showing_advanced_options() ? "--help-all also lists the advanced options." : "");
}

}  // namespace ragkv::cli
