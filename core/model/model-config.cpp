// ModelConfig::from_gguf: the architecture-specific reading of GGUF hyper-parameters.
#include "core/model/model-config.h"

#include <cmath>

#include "core/util/error.h"
#include "core/format/gguf.h"

namespace ragkv {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::gemma3: return "gemma3";
  }
  return "?";
}

AttentionParams ModelConfig::attention(int layer) const {
  AttentionParams p;
  p.n_head = n_head;
  p.n_kv_head = n_head_kv;
  p.head_dim = head_dim;
  p.scale = attn_scale;
  p.sliding_window = layer_is_local[layer] ? sliding_window : 0;
  return p;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& g) {
  ModelConfig c;
  c.arch_name = g.get_string("general.architecture");
  if (c.arch_name == "llama") c.arch = Arch::llama;
  else if (c.arch_name == "qwen2") c.arch = Arch::qwen2;
  else if (c.arch_name == "gemma3") c.arch = Arch::gemma3;
  else fail("{}: model architecture '{}' is not supported (supported: llama, qwen2, gemma3)", g.path(), c.arch_name);
  c.name = g.find_string("general.name").value_or(c.arch_name);

  const std::string a = c.arch_name + ".";
  auto positive = [&](const std::string& key, int64_t v) {
    if (v <= 0 || v > (int64_t(1) << 24)) fail("{}: {} = {} is not a valid size", g.path(), key, v);
    return int(v);
  };
  c.n_layer = positive(a + "block_count", g.get_int(a + "block_count"));
  c.n_embd = positive(a + "embedding_length", g.get_int(a + "embedding_length"));
  c.n_ff = positive(a + "feed_forward_length", g.get_int(a + "feed_forward_length"));
  c.n_head = positive(a + "attention.head_count", g.get_int(a + "attention.head_count"));
  c.n_head_kv = positive(a + "attention.head_count_kv",
                         g.find_int(a + "attention.head_count_kv").value_or(c.n_head));
  c.n_ctx_train = int(g.find_int(a + "context_length").value_or(4096));
  c.head_dim = int(g.find_int(a + "attention.key_length").value_or(c.n_embd / c.n_head));
  if (c.n_head % c.n_head_kv != 0)
    fail("{}: {} heads are not a multiple of {} KV heads", g.path(), c.n_head, c.n_head_kv);
  if (auto vlen = g.find_int(a + "attention.value_length"); vlen && *vlen != c.head_dim)
    fail("{}: value length {} differs from key length {} (not supported)", g.path(), *vlen, c.head_dim);
  c.norm_eps = float(g.get_float(a + "attention.layer_norm_rms_epsilon"));
  c.attn_scale = 1.f / std::sqrt(float(c.head_dim));
  c.layer_is_local.assign(c.n_layer, false);

  RopeParams& r = c.rope_global;
  r.n_rot = int(g.find_int(a + "rope.dimension_count").value_or(c.head_dim));
  if (r.n_rot != c.head_dim)
    fail("{}: partial rotary embeddings ({} of {} dims) are not supported", g.path(), r.n_rot, c.head_dim);
  r.freq_base = float(g.find_float(a + "rope.freq_base").value_or(10000.0));
  if (auto type = g.find_string(a + "rope.scaling.type"); type && *type != "none") {
    if (*type != "linear")
      fail("{}: RoPE scaling '{}' is not supported (linear only; Llama-3 scaling comes as "
           "rope_freqs.weight)", g.path(), *type);
    r.freq_scale = 1.f / float(g.get_float(a + "rope.scaling.factor"));
  }

  switch (c.arch) {
    case Arch::llama:
      r.neox = false;  // the GGUF converter permutes Q/K rows into adjacent pairs
      break;
    case Arch::qwen2:
      r.neox = true;
      c.qkv_bias = true;
      break;
    case Arch::gemma3: {
      r.neox = true;
      c.qk_norm = true;
      c.sandwich_norm = true;
      c.gelu = true;
      c.embd_scale = std::sqrt(float(c.n_embd));
      // Gemma 3: every 6th layer is global, the others use a sliding window and RoPE base 10k
      // (as in the reference implementation; the GGUF may carry the pattern explicitly).
      c.sliding_window = int(g.get_int(a + "attention.sliding_window"));
      const int pattern = int(g.find_int(a + "attention.sliding_window_pattern").value_or(6));
      for (int l = 0; l < c.n_layer; ++l) c.layer_is_local[l] = pattern > 0 && (l + 1) % pattern != 0;
      break;
    }
  }
  c.rope_local = r;
  if (c.arch == Arch::gemma3) {
    c.rope_local.freq_base = float(g.find_float(a + "rope.local.freq_base").value_or(10000.0));
    c.rope_local.freq_scale = 1.f;  // linear scaling applies to the global layers only
  }
  return c;
}

}  // namespace ragkv
