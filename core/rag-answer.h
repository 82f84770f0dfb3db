// Answering one question over given chunks in one reuse mode (DESIGN.md §1 `answer`, §4): the
// prompt is laid out, chunk caches are looked up in the store (missing, foreign or corrupt ones
// are computed in place and counted — never used), the fusor prefills, greedy decoding answers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fusor.h"
#include "core/generate.h"
#include "core/precompute.h"

namespace ragkv {

struct Chunk;

struct AnswerOptions {
  ReuseMode mode = ReuseMode::blend;
  BlendParams blend;
  GenerateOptions gen;  // max_tokens; stop_at_newline is set by the answerer
};

struct CacheCounts {
  int hits = 0;        // segments whose KV came from the store
  int exact_hits = 0;  // … at their canonical position (exact prefix hits)
  int misses = 0;      // no file for the segment (or a store of another model): computed
  int bad = 0;         // a file that failed its checks (header, checksum, truncation): computed
};

struct AnswerRecord {
  std::string mode;
  std::string answer;
  std::vector<std::string> chunk_ids;  // in prompt order
  std::vector<int32_t> output_ids;
  std::vector<float> first_logits;     // the first decoding step's logits
  PrefillStats prefill;
  CacheCounts cache;
  double retrieval_ms = 0, decode_ms = 0;
  double ttft_ms() const { return retrieval_ms + prefill.prefill_ms; }
  // The metrics object of ANSWERS.jsonl (DESIGN.md §1 "Files").
  nlohmann::json metrics() const;
};

// The cache of each segment of prompt that mode can use, opened from store (none for `full` or a
// null store); counts hits, misses and files that failed their header checks.
std::vector<SegmentSource> open_segment_sources(const KvStore* store, const CacheKeys& keys, const RagPrompt& prompt,
                                               ReuseMode mode, CacheCounts& counts);

class RagAnswerer {
 public:
  // store may be null (every mode then computes everything, like `full`).
  RagAnswerer(const Model& model, const PromptFormat& format, const KvStore* store);

  AnswerRecord answer(const std::string& question, const std::vector<const Chunk*>& chunks,
                      const AnswerOptions& opt);

  const CacheKeys& keys() const { return keys_; }

 private:
  const Model& model_;
  const PromptFormat& format_;
  const KvStore* store_;
  CacheKeys keys_;
  Workspace ws_;
};

}  // namespace ragkv
