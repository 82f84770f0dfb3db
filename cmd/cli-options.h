// Every value the command line sets, for every subcommand: the flag table (cmd/flag-table.h)
// binds each flag once to one field here, and the commands read their options from it. Only one
// subcommand runs per invocation, so the subcommands share the fields of the flags they share.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench/cache-trace.h"
#include "bench/prefill-bench.h"
#include "bench/retrieval-bench.h"
#include "cmd/cache-flags.h"
#include "cmd/device-flags.h"
#include "core/eval/gate.h"
#include "core/kv/claim-set.h"
#include "core/model/generate.h"
#include "core/model/random-model.h"
#include "core/rag/chunk-access-table.h"
#include "core/rag/rag-engine.h"
#include "core/util/paths.h"
#include "retrieval/index-dir.h"

namespace ragkv::cli {

struct CliOptions {
  // Inputs and outputs.
  std::string queries, index, store, model = default_llm_path(), embedder = default_embedder_dir();
  std::vector<std::string> corpus;
  std::vector<std::string> shard_files;   // merge: the shards' record files
  std::vector<std::string> ext;           // build-index: extensions read as text documents
  std::string out, summary, report, junit, answers, baseline_cache, warmup;
  std::string prompt, text, query;
  // Retrieval.
  size_t top_k = 5, limit = 0, k = 5;
  bool exact = false;
  std::string on_error = "fail";
  IndexBuildOptions build;                // chunking (its chunk_tokens taken from chunk_tokens) and HNSW
  std::optional<int> chunk_tokens;        // build-index: 256; bench reuse: 512
  std::optional<std::string> chunking;    // build-index: fixed or content (retrieval/chunker.h); unset: content         // build-index: fixed or content (retrieval/chunker.h)
  bool update = false;                    // build-index: bring the index at --out to the corpus (a new generation)
  // Model and device.
  DeviceFlags dev;
  // Modes.
  std::string mode, compare, baseline = "full";
  std::vector<std::string> modes;         // empty: eval's blend, or every mode for bench reuse
  std::vector<double> sweep;
  std::string require;                    // answer --require exact
  std::string fallback_margin;            // answer: the margin fallback's rule, M[/C] ("": auto takes the store's)
  std::vector<std::string> fallback_margins;  // eval: the margin fallbacks derived from the records
  ModeDefaults defaults;                  // ratio, check layers, sinks, focus window, max tokens
  // Generation.
  GenerateOptions sampling;               // temperature, top-p, stop (max_tokens: defaults.max_tokens)
  std::optional<uint64_t> seed;           // the sampler's (default 0) or make-test-model's weights' (42)
  bool chat = false, json = false, no_special = false, bos = false;
  // Store, tiers and scheduling.
  CacheFlags cache;
  size_t batch = 8, reorder_window = 64, ca_window = kDefaultCaWindow, search_slice = 32;
  int64_t promotion_threshold = 1;
  bool no_reorder = false, no_dedup = false, pipeline = false, write_back = false;
  size_t neighbours = 2;
  std::string donor_reuse = "on";         // precompute: edited chunks built from their earlier version's cache
  double donor_repair = 0.15;             // precompute: the donor repair's share of the aligned tokens
  std::optional<size_t> max_variants;
  std::optional<uint64_t> variant_bytes;
  double claim_lease = kDefaultClaimLeaseSeconds;
  std::string store_key;                  // signed caches (core/kv/store-key.h); "": none
  bool read_only = false;                 // answer, eval: never write the store
  std::string remote;                     // precompute, answer, eval: redis://host[:port][/db] below the store; "": none
  std::string shard;                      // precompute --shard I/N (core/util/shard.h); "": from the environment
  std::optional<size_t> shard_count;      // the count beside Kubernetes' JOB_COMPLETION_INDEX
  std::vector<int> kv_bits;               // precompute: one value (default: the store's); bench reuse: 16
  std::optional<uint64_t> max_bytes;      // store gc: the byte budget (none: only --keep-index)
  std::vector<std::string> keep_index;    // store gc: the indexes whose chunks stay
  bool include_canonical = false, dry_run = false;
  // Gate.
  GateThresholds gate;
  bool resume = false, fit_alpha = false, fit_fallback = false;
  // Benchmarks.
  std::vector<std::string> models;        // bench prefill; empty: the two default LLMs
  PrefillBenchOptions prefill;            // prompt tokens, decode tokens, decode batch
  int repetitions = 3;
  int chunks = 6;
  std::vector<std::string> tiers;         // bench reuse; empty: every tier
  size_t max_queries = 1000;
  std::vector<uint64_t> host_budgets;
  std::vector<std::string> policies, orders;  // bench cache; empty: all
  // make-test-model.
  RandomModelSpec spec;
  std::string weight_type = "f32";
};

// make-test-model's --weight-type names (lower case, as llama.cpp's quantize tool spells them).
inline const std::vector<std::pair<std::string, GgmlType>>& test_model_weight_types() {
  static const std::vector<std::pair<std::string, GgmlType>> types = {
      {"f32", GgmlType::F32},   {"f16", GgmlType::F16},   {"bf16", GgmlType::BF16}, {"q4_0", GgmlType::Q4_0},
      {"q4_1", GgmlType::Q4_1}, {"q5_0", GgmlType::Q5_0}, {"q5_1", GgmlType::Q5_1}, {"q8_0", GgmlType::Q8_0},
      {"q4_k", GgmlType::Q4_K}, {"q5_k", GgmlType::Q5_K}, {"q6_k", GgmlType::Q6_K}};
  return types;
}

}  // namespace ragkv::cli
