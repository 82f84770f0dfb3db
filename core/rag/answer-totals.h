// Per-run running sums of `answer`'s per-query metrics, and their means for the run's summary.
#pragma once
#include <cstddef>

#include <nlohmann/json.hpp>

#include "core/rag/answer.h"
#include "core/rag/loading-controller.h"

namespace ragkv {

struct AnswerTotals {
  size_t n = 0;
  double ttft = 0, prefill = 0, recompute = 0, load = 0, hidden = 0;
  double hits = 0, misses = 0, bad = 0, written_back = 0, output_tokens = 0, deduplicated = 0;
  double write_back_failed = 0;
  double composed = 0, fallbacks = 0;  // answers that approximate full's; prompts the margin fallback recomputed
  double device_hits = 0, host_hits = 0, disk_hits = 0, chunk_hits = 0, chunk_memory_hits = 0, chunks = 0;
  double exact_path_chunks = 0;
  double prompt_tokens = 0, computed_tokens = 0;
  LoadControlSummary load_control;  // answer --load-control report|on

  // One answered query's timings, cache use and compute (its scores are summed by
  // core/eval/answer-scoring.h).
  void add(const AnswerRecord& r);
  nlohmann::json to_json() const;
};

}  // namespace ragkv
