// Greedy generation: prefill a prompt, then decode token by token with the KV cache.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

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
// last prompt token. Appends the generated tokens to kv.
DecodeResult decode_greedy(const Model& model, KvCache& kv, Workspace& ws, std::vector<float> logits,
                           const GenerateOptions& opt,
                           const std::function<void(const std::string&)>& on_piece = {});

GenerateResult generate_greedy(const Model& model, const std::vector<int32_t>& prompt_ids,
                               const GenerateOptions& opt,
                               const std::function<void(const std::string&)>& on_piece = {});

}  // namespace ragkv
