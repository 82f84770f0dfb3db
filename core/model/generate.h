// Greedy generation: prefill a prompt, then decode token by token with the KV cache.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/model/model.h"

namespace ragkv {

struct GenerateOptions {
  int max_tokens = 32;
  bool stop_at_eog = true;
  bool stop_at_newline = false;  // stop at the first line break that follows some text (QA answers)
  int64_t n_ctx = 0;  // 0: prompt + max_tokens
  // Sampling. temperature 0 (the default, and what eval compares) is greedy. Above 0: the next
  // token is drawn from softmax(logits / temperature), cut to the smallest set of most likely
  // tokens holding top_p of the probability (nucleus sampling, Holtzman et al. 2020), by a
  // generator seeded with seed for each sequence — the same seed gives the same text, decoded
  // alone or in a batch.
  float temperature = 0;
  float top_p = 1;
  uint64_t seed = 0;
  // Decoding stops once the text contains one of these strings; the text ends before it (the
  // token that completed it is kept in output_ids).
  std::vector<std::string> stop;
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
// p1 − p2 of softmax(logits): how far the most likely next token is ahead of the second (a
// near-tie when small). 1 with fewer than two logits.
double top2_probability_gap(const std::vector<float>& logits);

// Prompt tokens: BOS when the model wants one, then text tokenized with special-token parsing.
std::vector<int32_t> tokenize_prompt(const Tokenizer& tok, const std::string& text);

// Decoding after a prefilled prompt (greedy unless opt.temperature > 0): kv holds kv.n_used rows
// and logits are those of the last prompt token. Appends the generated tokens to kv. (DecodeBatch
// with one sequence.)
DecodeResult decode_text(const Model& model, KvCache& kv, Workspace& ws, std::vector<float> logits,
                           const GenerateOptions& opt,
                           const std::function<void(const std::string&)>& on_piece = {});

// The token choices of one sequence: after each step's logits, the next token (the most likely,
// or sampled when opt.temperature > 0) or the end (EOG, a line break after some text with
// stop_at_newline, a stop string, max_tokens).
class TokenChooser {
 public:
  TokenChooser(const Tokenizer& tok, const GenerateOptions& opt) : tok_(tok), opt_(opt), rng_(opt.seed) {}
  // Takes the logits (n_vocab values) of the last token fed; true when next() must be fed.
  bool choose(const float* logits, int64_t n_vocab, const std::function<void(const std::string&)>& on_piece = {});
  int32_t next() const { return next_; }
  // The result so far (text trimmed when stop_at_newline); call once, at the end.
  DecodeResult finish();

 private:
  int32_t sample(const float* logits, int64_t n_vocab);
  size_t stop_position(size_t appended_from) const;  // where a stop string starts, or npos

  const Tokenizer& tok_;
  GenerateOptions opt_;
  std::mt19937_64 rng_;
  DecodeResult r_;
  int steps_ = 0;
  int32_t next_ = -1;
};

// Decoding of several prefilled sequences together (continuous batching): every step feeds
// each active sequence's last token through one Model::decode_step, so each weight is read once
// per step for all of them. Sequences join (add) and leave (when they stop) between steps; each
// one's tokens equal decode_text's for it alone.
class DecodeBatch {
 public:
  explicit DecodeBatch(const Model& model) : model_(model) {}
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
    TokenChooser chooser;
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

GenerateResult generate_text(const Model& model, const std::vector<int32_t>& prompt_ids,
                               const GenerateOptions& opt,
                               const std::function<void(const std::string&)>& on_piece = {});

}  // namespace ragkv
