// Greedy generation: prefill a prompt, then decode token by token with the KV cache.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace ragkv {

struct GenerateOptions {
  int max_tokens = 32;
  bool stop_at_eog = true;
  bool stop_at_newline = false;  // stop at the first line break that follows some text (QA answers)
  int64_t n_ctx = 0;  // 0: prompt + max_tokens
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::string text;
  double prefill_ms = 0, decode_ms = 0;
  std::vector<float> first_logits;  // logits after the prompt (the first decoding step)
};

struct DecodeResult {
  std::vector<int32_t> output_ids;
  std::string text;  // with stop_at_newline: up to the line break, trimmed
  double decode_ms = 0;
};

// Returns the index of the largest value (the first one on ties).
int32_t argmax(const std::vector<float>& v);

// Prompt tokens: BOS when the model wants one, then text tokenized with special-token parsing.
std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text);

// Greedy decoding after a prefilled prompt: kv holds kv.n_used rows and logits are those of the
// last prompt token. Appends the generated tokens to kv. (GreedyBatch with one sequence.)
DecodeResult decode_greedy(const Model& model, KvCache& kv, Workspace& ws, std::vector<float> logits,
                           const GenerateOptions& opt,
                           const std::function<void(const std::string&)>& on_piece = {});

// The token choices of one greedy sequence: after each step's logits, the next token or the end
// (EOG, a line break after some text with stop_at_newline, max_tokens).
class GreedyChooser {
 public:
  GreedyChooser(const Tokenizer& tok, const GenerateOptions& opt) : tok_(tok), opt_(opt) {}
  // Takes the logits (n_vocab values) of the last token fed; true when next() must be fed.
  bool choose(const float* logits, int64_t n_vocab, const std::function<void(const std::string&)>& on_piece = {});
  int32_t next() const { return next_; }
  // The result so far (text trimmed when stop_at_newline); call once, at the end.
  DecodeResult finish();

 private:
  const Tokenizer& tok_;
  GenerateOptions opt_;
  DecodeResult r_;
  int steps_ = 0;
  int32_t next_ = -1;
};

// Greedy decoding of several prefilled sequences together (continuous batching): every step feeds
// each active sequence's last token through one Model::decode_step, so each weight is read once
// per step for all of them. Sequences join (add) and leave (when they stop) between steps; each
// one's tokens equal decode_greedy's for it alone.
class GreedyBatch {
 public:
  explicit GreedyBatch(const Model& model) : model_(model) {}
  // A sequence whose prompt is prefilled in kv (room for opt.max_tokens more rows), logits those
  // of its last prompt token. Returns its id; a sequence that stops at once is finished already.
  int add(KvCache kv, const std::vector<float>& logits, const GenerateOptions& opt);
  size_t active() const;
  // One decode step of every active sequence; returns the ids that finished in it (or at add).
  std::vector<int> step();
  // The result of a finished sequence (once); decode_ms is its time in the batch.
  DecodeResult take(int id);

 private:
  struct Sequence {
    KvCache kv;
    GreedyChooser chooser;
    bool done = false;
    std::chrono::steady_clock::time_point start;
    double decode_ms = 0;
  };
  const Model& model_;
  Workspace ws_;
  std::map<int, std::unique_ptr<Sequence>> seqs_;
  std::vector<int> finished_at_add_;
  int next_id_ = 0;
};

GenerateResult generate_greedy(const Model& model, const std::vector<int32_t>& prompt_ids,
                               const GenerateOptions& opt,
                               const std::function<void(const std::string&)>& on_piece = {});

}  // namespace ragkv
