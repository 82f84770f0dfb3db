// An eval run (the quality gate): every query answered in the baseline and in each mode over the
// same chunks, the records written and resumable, the summary with paired bootstrap intervals, the
// gate's checks, the report and JUnit files, and Cache-Craft's α fit (Eq. 13).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/eval/gate.h"
#include "core/rag/fallback-rule.h"
#include "core/rag/queries.h"
#include "core/rag/rag-engine.h"

namespace ragkv {

struct EvalRunOptions {
  std::vector<std::string> modes;  // mode specs; reuse, the reference of recovery, is added when missing
  std::string baseline = "full";
  std::vector<double> sweep;  // each blend mode without @R at each ratio, each craft mode without @ALPHA at each α
  std::vector<FallbackRule> fallback_margins;  // each mode also as its margin fallback under each rule, derived (not gated)
  ModeDefaults defaults;
  size_t top_k = 5;  // recorded in the settings (the engine's retriever uses it)
  GateThresholds gate;
  OnError on_error = OnError::fail;
  size_t batch = 8;
  std::string answers;         // every mode's answers per query (JSONL); "": none
  bool resume = false;         // keep the queries answered in `answers` (or its .partial)
  std::string baseline_cache;  // the baseline's answers kept between runs; "": none
  std::string report, junit;   // files to write; "": none
  bool fit_alpha = false;
  bool fit_fallback = false;  // auto's cheapest margin-fallback rule that passes the gate, into STORE/craft.json
  std::string queries_path, store_path;  // named in messages and in the fitted α's record
};

struct EvalRunResult {
  nlohmann::json summary;  // null when nothing ran (exit_code 2)
  std::vector<GateCheck> checks;
  int exit_code = 0;  // 0 the gate passed (with fit_alpha / fit_fallback: an α / a rule passed), 1 it failed, 2 a usage error
};

EvalRunResult run_eval(RagEngine& engine, const QueryFile& queries, const EvalRunOptions& o);

}  // namespace ragkv
