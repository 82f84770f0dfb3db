// Writes GGUF models with random weights and given shapes: small models for fast tests, and
// full-size shapes for benchmarks on machines the real model files cannot be copied to.
// The vocabulary is GPT-2 byte-level (256 byte tokens, a few merges and chat specials).
#pragma once
#include <cstdint>
#include <string>

#include "format/quant.h"

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
  int sliding_window = 16;     // gemma3 only
  GgmlType weight_type = GgmlType::F32;  // F32, F16, BF16 or Q8_0 for the projection matrices
  uint64_t seed = 42;
};

void write_random_model(const RandomModelSpec& spec, const std::string& path);

}  // namespace ragkv
