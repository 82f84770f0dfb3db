// Answering one question over given chunks in one reuse mode (DESIGN.md §1 `answer`, §4): the
// prompt is laid out (rag/prompt.h), planned (rag/plan.h: chunk caches looked up in the tiers;
// missing, foreign or corrupt ones are computed in place and counted — never used), prefilled by
// the fusor (rag/fusor.h) and answered by greedy decoding.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv-tiers.h"
#include "model/generate.h"
#include "rag/cache-keys.h"
#include "rag/fusor.h"
#include "rag/plan.h"

namespace ragkv {

struct Chunk;

struct AnswerOptions {
  ReuseMode mode = ReuseMode::blend;
  BlendParams blend;
  GenerateOptions gen;  // max_tokens; stop_at_newline is set by the answerer
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

class RagAnswerer {
 public:
  // tiers may be null (every mode then computes everything, like `full`).
  RagAnswerer(const Model& model, const PromptFormat& format, const KvTiers* tiers);

  AnswerRecord answer(const std::string& question, const std::vector<const Chunk*>& chunks,
                      const AnswerOptions& opt);

  const CacheKeys& keys() const { return keys_; }

 private:
  const Model& model_;
  const PromptFormat& format_;
  const KvTiers* tiers_;
  CacheKeys keys_;
  Workspace ws_;
};

}  // namespace ragkv
