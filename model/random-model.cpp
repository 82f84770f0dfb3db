// write_random_model: a complete, loadable GGUF with random weights (scaled so activations stay
// in a sane range through the layers) and a byte-level BPE vocabulary.
#include "model/random-model.h"

#include <cmath>
#include <cstring>
#include <random>

#include "util/error.h"
#include "format/fp16.h"
#include "format/gguf-writer.h"

namespace ragkv {

namespace {

// GPT-2's reversible byte → printable code point mapping, as UTF-8 strings.
std::vector<std::string> byte_level_symbols() {
  std::vector<int> cps(256, -1);
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    cps[b] = printable ? b : 256 + n++;
  }
  std::vector<std::string> out;
  for (int cp : cps) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    out.push_back(s);
  }
  return out;
}

std::vector<uint8_t> encode_weights(GgmlType type, const std::vector<float>& v, int64_t row) {
  std::vector<uint8_t> out;
  if (type == GgmlType::F32) {
    out.resize(v.size() * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else if (type == GgmlType::F16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const f16_t h = fp32_to_fp16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (type == GgmlType::BF16) {
    out.resize(v.size() * 2);
    for (size_t i = 0; i < v.size(); ++i) {
      const bf16_t h = fp32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (type == GgmlType::Q8_0) {  // blocks of 32: f16 scale, 32 int8
    if (row % 32 != 0) fail("Q8_0 test weights need rows that are a multiple of 32, got {}", row);
    for (size_t b = 0; b < v.size(); b += 32) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[b + i]));
      const float d = amax / 127.f;
      const f16_t dh = fp32_to_fp16(d);
      out.push_back(uint8_t(dh & 0xff));
      out.push_back(uint8_t(dh >> 8));
      for (int i = 0; i < 32; ++i)
        out.push_back(uint8_t(int8_t(d > 0 ? std::lround(v[b + i] / d) : 0)));
    }
  } else {
    fail("random models support F32, F16, BF16 and Q8_0 weights, not {}", ggml_type_name(type));
  }
  return out;
}

}  // namespace

void write_random_model(const RandomModelSpec& s, const std::string& path) {
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "gemma3")
    fail("random model: unknown architecture '{}'", s.arch);
  const int hd = s.head_dim > 0 ? s.head_dim : s.n_embd / s.n_head;
  const int q_dim = s.n_head * hd, kv_dim = s.n_head_kv * hd;
  const bool gemma = s.arch == "gemma3";

  GgufWriter w;
  const std::string a = s.arch + ".";
  w.set("general.architecture", s.arch);
  w.set("general.name", "ragkv random " + s.arch);
  w.set_u32(a + "block_count", s.n_layer);
  w.set_u32(a + "context_length", s.n_ctx);
  w.set_u32(a + "embedding_length", s.n_embd);
  w.set_u32(a + "feed_forward_length", s.n_ff);
  w.set_u32(a + "attention.head_count", s.n_head);
  w.set_u32(a + "attention.head_count_kv", s.n_head_kv);
  w.set_u32(a + "attention.key_length", hd);
  w.set_u32(a + "attention.value_length", hd);
  w.set_u32(a + "rope.dimension_count", hd);
  w.set_f32(a + "rope.freq_base", gemma ? 1e6f : 10000.f);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  if (gemma) w.set_u32(a + "attention.sliding_window", s.sliding_window);

  // Vocabulary: 256 byte symbols, merges "t"+"h", "Ġ"+"t", "e"+"r", then specials.
  std::vector<std::string> tokens = byte_level_symbols();
  const std::vector<std::string> merges = {"t h", "Ġ t", "e r"};
  for (const auto& m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  std::vector<int32_t> types(tokens.size(), 1);
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(sp);
    types.push_back(3);
  }
  const int n_vocab = int(tokens.size());
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "default");
  w.set("tokenizer.ggml.tokens", tokens);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.merges", merges);
  w.set_u32("tokenizer.ggml.bos_token_id", n_vocab - 3);
  w.set_u32("tokenizer.ggml.eos_token_id", n_vocab - 3);
  w.set_bool("tokenizer.ggml.add_bos_token", false);

  std::mt19937_64 rng(s.seed);
  auto matrix = [&](const std::string& name, int64_t in, int64_t out, GgmlType type) {
    std::normal_distribution<float> dist(0.f, 1.f / std::sqrt(float(in)));
    std::vector<float> v(static_cast<size_t>(in * out));
    for (float& x : v) x = dist(rng);
    w.add_tensor(name, type, {in, out}, encode_weights(type, v, in));
  };
  auto norm = [&](const std::string& name, int64_t n) {
    std::uniform_real_distribution<float> dist(0.8f, 1.2f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    w.add_tensor_f32(name, {n}, v);
  };
  matrix("token_embd.weight", s.n_embd, n_vocab, GgmlType::F32);
  norm("output_norm.weight", s.n_embd);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", s.n_embd);
    matrix(p + "attn_q.weight", s.n_embd, q_dim, s.weight_type);
    matrix(p + "attn_k.weight", s.n_embd, kv_dim, s.weight_type);
    matrix(p + "attn_v.weight", s.n_embd, kv_dim, s.weight_type);
    matrix(p + "attn_output.weight", q_dim, s.n_embd, s.weight_type);
    if (s.arch == "qwen2") {
      norm(p + "attn_q.bias", q_dim);
      norm(p + "attn_k.bias", kv_dim);
      norm(p + "attn_v.bias", kv_dim);
    }
    if (gemma) {
      norm(p + "attn_q_norm.weight", hd);
      norm(p + "attn_k_norm.weight", hd);
      norm(p + "post_attention_norm.weight", s.n_embd);
      norm(p + "post_ffw_norm.weight", s.n_embd);
    }
    norm(p + "ffn_norm.weight", s.n_embd);
    matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff, s.weight_type);
    matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, s.weight_type);
    matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, s.weight_type);
  }
  w.write(path);
}

}  // namespace ragkv
