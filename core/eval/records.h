// The per-query record of `ragkv eval --answers` (one JSONL line: every mode's answer, metrics
// and first-token KL against the baseline) and reading those records back, so an interrupted or
// sharded evaluation resumes without answering a query twice (`--resume`).
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/rag/answer.h"

namespace ragkv {

// What a record depends on beyond the query: resuming under other settings is refused.
struct EvalSettings {
  std::string model_fingerprint, baseline;
  std::vector<std::string> modes;  // mode spec names (core/rag/mode-spec.h), baseline first
  double recompute_ratio = 0;
  int check_layers = 0, max_tokens = 0;
  size_t top_k = 0;
  // Selection defaults of blend variants that name no method. Recorded only where they differ
  // from the defaults of earlier versions (kv, no sinks, check layers 1..N), so their records
  // still resume.
  std::string selection = "kv";
  int sink_tokens = 0;
  std::vector<int> check_at;
  double adaptive = 0;
  // craft's defaults; recorded only when a craft mode is evaluated (older records resume).
  bool with_craft = false;
  double alpha = 0;
  int focus_window = 0;
  // The engine that answers (binary hash, model, device, threads, store KV encoding): written in
  // every record beside the settings; --resume refuses records of another engine. Null: not checked.
  nlohmann::json engine;
  nlohmann::json to_json() const;
};

// {"binary": XXH64 of the executable, "model", "device", "kernels" (Backend::kernels: the same
// binary chooses its kernels by CPU and environment), "threads", "kv": the store's KV encoding or
// "none"}: what makes two runs' answers and timings comparable.
nlohmann::json engine_identity(const std::string& model_fingerprint, const std::string& device,
                               const std::string& kernels, int threads, const std::string& kv);

// One mode's result as eval_summary needs it.
struct EvalAnswer {
  std::string answer;
  std::vector<int32_t> output_ids;
  double kl_first_token = 0;  // KL(baseline ‖ this mode) of the first decoding step
  double compute_fraction = 0;  // PrefillStats::compute_fraction: every pass over full's token-layers
  double ttft_ms = 0, prefill_ms = 0, load_ms = 0, load_hidden_ms = 0;
  double reused_recompute = -1;  // recomputed over reused token-layers; -1 where nothing was reused
  int cache_bad = 0, cache_misses = 0;
  bool composed = false;    // some KV approximated full's (AnswerRecord::composed)
  double first_margin = -1;  // the first step's top-2 probability gap (−1: not recorded)
  bool repair_moved = false;  // prophet's unrepaired first pass had another first token
  // The share of the prompt a fallback keeps (its exact prefix; −1: not recorded, as in records
  // made when a fallback recomputed everything).
  double exact_prefix_share = -1;
  bool fell_back = false;   // the margin fallback recomputed it after its exact prefix
  // craft (metrics "craft"): chunks reused, of them from a non-canonical variant and as an exact
  // chain, Σ CFO, tokens fixed, and Algorithm 1's cut-off layer (−1: none). cached_chunks 0: no craft.
  int craft_chunks = 0, craft_variant_chunks = 0, craft_exact_chunks = 0;
  double craft_cfo_sum = 0;
  int64_t craft_fix_tokens = 0;
  int craft_cutoff_layer = -1;
};

struct EvalItem {
  std::string id;
  std::vector<std::string> golds;             // may be empty
  std::map<std::string, EvalAnswer> by_mode;  // baseline and every mode
};

// The JSONL record of one query: {"id","answers","chunks","settings","modes":{mode:{"answer",
// "output_ids","metrics","kl_first_token_vs_baseline"}}}. by_mode holds the baseline too.
nlohmann::json eval_record(const std::string& id, const std::vector<std::string>& golds,
                           const std::vector<std::string>& chunk_ids,
                           const std::map<std::string, AnswerRecord>& by_mode, const EvalSettings& settings);

// The item of a record; Error naming the missing field when it lacks one of settings.modes.
EvalItem eval_item_of(const nlohmann::json& record, const EvalSettings& settings);

struct ResumedEval {
  std::vector<std::string> lines;  // the records kept, as read
  std::vector<EvalItem> items;
  std::set<std::string> ids;
  bool dropped_partial_line = false;  // an unfinished last line (the run was killed mid-write)
};

// Reads the records of path. A last line cut short is dropped; any other line that is not a
// record made under `settings` for a query in query_ids is an Error naming path:line.
ResumedEval read_eval_records(const std::string& path, const EvalSettings& settings,
                              const std::set<std::string>& query_ids);

}  // namespace ragkv
