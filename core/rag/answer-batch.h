// Answers decoded together (continuous batching as vLLM and SGLang schedule decode): up to
// max_active prompts are in flight. Each admitted prompt is prefilled at once, in its own reuse
// mode (RagAnswerer::prefill, unchanged), and joins the decode batch; every step feeds all active
// sequences' last tokens through one Model::decode_step, so each weight is read once per step for
// all of them; a finished answer retires and frees its place for the next. The tokens of each
// answer equal RagAnswerer::answer's for it alone (greedy; DecodeBatch).
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/model/generate.h"
#include "core/rag/answer.h"

namespace ragkv {

class AnswerBatch {
 public:
  AnswerBatch(RagAnswerer& answerer, size_t max_active);

  // Room for another prompt.
  bool can_admit() const { return pending_.size() < max_active_; }
  bool empty() const { return pending_.empty(); }
  // Prefills the prompt and adds it to the decode batch under the caller's tag (any value, unique
  // among those in flight). Throws what RagAnswerer::prefill throws; the batch is unchanged then.
  void admit(size_t tag, const std::string& question, const std::vector<const Chunk*>& chunks,
             const AnswerOptions& opt);
  // One decode step of every active answer; returns those finished in it (or at admission), with
  // their tags, in the order they were admitted.
  std::vector<std::pair<size_t, AnswerRecord>> step();

  // Decode steps taken and sequence-steps fed (their ratio is the mean batch size).
  size_t steps() const { return steps_; }
  size_t sequence_steps() const { return sequence_steps_; }

 private:
  struct Pending {
    size_t tag;
    PrefilledAnswer prefilled;  // its kv moved into the DecodeBatch
  };
  RagAnswerer& answerer_;
  size_t max_active_;
  DecodeBatch decode_;
  std::map<int, Pending> pending_;  // by DecodeBatch id: ids grow, so this is admission order
  size_t steps_ = 0, sequence_steps_ = 0;
};

}  // namespace ragkv
