// A multi-query answer run: a query file in, one record per query out in input order. Inside:
// retrieval (ahead of answering, or pipelined with speculative loads), the answering order
// (RAGCache's reordering), conversations with CRAFT's deduplication, the CA-Table, continuous
// batching, the comparison answers and the run's summary.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/rag/chunk-access-table.h"
#include "core/rag/mode-spec.h"
#include "core/rag/queries.h"
#include "core/rag/rag-engine.h"

namespace ragkv {

struct AnswerRunOptions {
  ModeSpec mode{ReuseMode::full};
  std::optional<ModeSpec> compare;  // also answer in this mode and score against it
  ModeDefaults defaults;
  GenerateOptions sampling;  // temperature, top_p, seed, stop of every answer (greedy by default)
  OnError on_error = OnError::fail;
  size_t batch = 8;           // prompts decoded together
  bool write_back = false;    // Cache-Craft write-back of computed chunks
  bool reorder = true;        // RAGCache §5.2: queries sharing cached prefixes together, best-cached first
  size_t reorder_window = 64;
  bool dedup = true;          // CRAFT §4.3: a conversation's chunks once
  bool freq_order = false;    // CRAFT §4: each prompt's chunks most accessed first
  size_t ca_window = kDefaultCaWindow;
  int64_t promotion_threshold = 1;
  bool pipeline = false;      // retrieval in a worker ahead of answering (RAGCache §5.3)
  size_t search_slice = 32;   // with pipeline: staged search with speculative loads (0: none)
  bool apply_load_control = false;  // the engine's loading controller carried out, not only reported
  bool raise_ratio = false;
  bool require_exact = false;  // AnswerOptions::require_exact: never compose
  FallbackRule fallback;  // AnswerOptions::fallback: prefill again after the exact prefix near ties
};

// One answer as it completes (answering order), for a scorer to add to before it is written.
struct AnsweredQuery {
  const Query& query;
  const AnswerRecord& record;
  const AnswerRecord* compared = nullptr;  // the comparison mode's answer, when one was asked for
  std::string compare_name;                // that mode's name
  nlohmann::json line;                     // id, answer, mode, chunks (conversation and turn)
  nlohmann::json metrics;                  // the record's and the run's; becomes line["metrics"]
};
// Scores an answer (core/eval/answer-scoring.h): the run, below eval, scores nothing itself.
using AnswerScorer = std::function<void(AnsweredQuery&)>;

struct AnswerRunResult {
  nlohmann::json summary;
  size_t answered = 0, skipped = 0;
  double bad_reads = 0;  // chunk-cache reads that failed their checks (recomputed)
};

// Answers every query of `queries` through `engine`; each answer is scored by `score` (may be
// empty) as it completes, and its record (one JSON line) goes to `out` in input order as soon as
// the queries before it are done. A query that fails is an Error naming its file and line, or with
// OnError::skip is counted and reported on stderr.
AnswerRunResult run_answers(RagEngine& engine, const QueryFile& queries, const AnswerRunOptions& o,
                            const AnswerScorer& score, const std::function<void(const std::string&)>& out);

// "<file>:<line>: query <id>: <what>" (the message as it is when it names the file already).
std::string query_error(const Query& q, const std::exception& e);

}  // namespace ragkv
