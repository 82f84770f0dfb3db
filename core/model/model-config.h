// Model hyper-parameters read from GGUF metadata: one struct for every supported architecture.
#pragma once
#include <string>
#include <vector>

#include "core/backend/backend.h"

namespace ragkv {

class GgufFile;

enum class Arch { llama, qwen2, gemma3 };

struct ModelConfig {
  Arch arch = Arch::llama;
  std::string arch_name;     // general.architecture
  std::string name;          // general.name
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float norm_eps = 1e-5f;
  float attn_scale = 0.f;    // multiplies q·k
  float embd_scale = 1.f;    // token embeddings are multiplied by this (gemma: √n_embd)
  bool qkv_bias = false;     // qwen2
  bool qk_norm = false;      // gemma3: RMSNorm on each q and k head
  bool sandwich_norm = false;  // gemma3: post-attention and post-FFN norms
  bool gelu = false;         // GeGLU (gemma) instead of SwiGLU
  int sliding_window = 0;    // gemma3 local layers
  std::vector<bool> layer_is_local;  // per layer: uses the sliding window and the local RoPE
  RopeParams rope_global;    // RoPE of global (all) layers
  RopeParams rope_local;     // RoPE of sliding-window layers (gemma3: base 10 000)

  int kv_dim() const { return n_head_kv * head_dim; }
  int q_dim() const { return n_head * head_dim; }
  const RopeParams& rope(int layer) const { return layer_is_local[layer] ? rope_local : rope_global; }
  AttentionParams attention(int layer) const;

  // Reads and validates the hyper-parameters; throws naming the missing key or the
  // unsupported architecture.
  static ModelConfig from_gguf(const GgufFile& gguf);
};

const char* arch_name(Arch a);

}  // namespace ragkv
