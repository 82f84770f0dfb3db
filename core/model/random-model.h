// Writes GGUF models with random weights and given shapes: small models for fast tests, and
// full-size shapes (an 8B Llama with quantised weights) for benchmarks on machines the real model
// files cannot be copied to. The vocabulary is GPT-2 byte-level (256 byte tokens, a few merges and
// chat specials), optionally padded with filler tokens to a real model's vocabulary size.
#pragma once
#include <cstdint>
#include <string>

#include "core/format/quant.h"

namespace ragkv {

struct RandomModelSpec {
  std::string arch = "llama";  // llama, qwen2 or gemma3
  int n_layer = 2;
  int n_embd = 64;
  int n_head = 4;
  int n_head_kv = 2;
  int head_dim = 0;            // 0: n_embd / n_head
  int n_ff = 128;
  int n_ctx = 256;
  int n_vocab = 0;             // 0: the byte-level vocabulary alone (262 tokens); more: filler tokens
  int sliding_window = 16;     // gemma3 only
  // The projection matrices' type: any type core/format/quantize.h writes. token_embd (and output.weight)
  // stay F32 for float types (F32, F16, BF16) and take the quantised type otherwise.
  GgmlType weight_type = GgmlType::F32;
  // Q4_K_M-like mix instead of weight_type (the rule of llama.cpp's Q4_K_M): Q4_K everywhere, except
  // Q6_K for output.weight (token_embd when the head is tied) and for attn_v and ffn_down on the
  // first and last eighth of the layers and every third layer between.
  bool q4_k_m = false;
  bool separate_output = false;  // an output.weight of its own (as Llama-3-8B); else the head is token_embd
  uint64_t seed = 42;
  int threads = 1;             // generation and quantisation threads (the weights do not depend on it)
  bool progress = false;       // progress on stderr (core/util/progress.h): an 8B shape takes minutes
};

// The type write_random_model gives a matrix: name is the tensor name without "blk.N." (e.g.
// "token_embd.weight", "attn_v.weight"), layer its block (-1 for token_embd and output).
GgmlType random_model_matrix_type(const RandomModelSpec& spec, const std::string& name, int layer);

void write_random_model(const RandomModelSpec& spec, const std::string& path);

}  // namespace ragkv
