// write_random_model: a complete, loadable GGUF with random weights (scaled so activations stay
// in a sane range through the layers) and a byte-level BPE vocabulary. Matrices are N(0, 1/in)
// values encoded by core/format/quantize.h, made on `threads` threads when the writer reaches them.
#include "core/model/random-model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/format/gguf-writer.h"
#include "core/format/quantize.h"
#include "core/util/error.h"
#include "core/util/progress.h"

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

// A seed for stream k of a stream family (splitmix64's finaliser over seed and k): tensor t of the
// model draws from stream (seed, t), its task j of rows from stream (tensor seed, j).
uint64_t stream_seed(uint64_t seed, uint64_t k) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (k + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Rows of N(0, stddev²) values encoded as type: [out] rows of ggml_row_bytes(type, in). Rows are
// made in tasks of about kTaskElems values, each from its own random stream, by `threads` threads
// taking tasks in turn — the bytes depend on the seed and the shape only, not on the threads.
std::vector<uint8_t> random_rows(GgmlType type, int64_t in, int64_t out, float stddev, uint64_t seed, int threads) {
  constexpr int64_t kTaskElems = 1 << 16;
  const size_t row_bytes = ggml_row_bytes(type, in);
  std::vector<uint8_t> bytes(row_bytes * static_cast<size_t>(out));
  const int64_t rows_per_task = std::max<int64_t>(1, kTaskElems / in);
  const int64_t tasks = (out + rows_per_task - 1) / rows_per_task;
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    try {
      std::vector<float> row(static_cast<size_t>(in));
      for (int64_t t = next++; t < tasks; t = next++) {
        std::mt19937_64 rng(stream_seed(seed, uint64_t(t)));
        std::normal_distribution<float> dist(0.f, stddev);
        for (int64_t r = t * rows_per_task; r < std::min(out, (t + 1) * rows_per_task); ++r) {
          for (float& x : row) x = dist(rng);
          quantize_row(type, row.data(), bytes.data() + static_cast<size_t>(r) * row_bytes, in);
        }
      }
    } catch (...) {
      std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
      next = tasks;
    }
  };
  std::vector<std::thread> helpers;
  for (int i = 1; i < std::min<int64_t>(threads, tasks); ++i) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
  if (error) std::rethrow_exception(error);
  return bytes;
}

bool is_float_type(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// llama.cpp's Q4_K_M gives more bits to attn_v and ffn_down on these layers: the first and last
// eighth, and every third layer between.
bool more_bits_layer(int layer, int n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

}  // namespace

GgmlType random_model_matrix_type(const RandomModelSpec& s, const std::string& name, int layer) {
  const bool head = name == "output.weight" || (name == "token_embd.weight" && !s.separate_output);
  if (s.q4_k_m) {
    if (head) return GgmlType::Q6_K;
    if ((name == "attn_v.weight" || name == "ffn_down.weight") && more_bits_layer(layer, s.n_layer))
      return GgmlType::Q6_K;
    return GgmlType::Q4_K;
  }
  if (layer < 0 && is_float_type(s.weight_type)) return GgmlType::F32;  // token_embd, output
  return s.weight_type;
}

void write_random_model(const RandomModelSpec& s, const std::string& path) {
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "gemma3")
    fail("random model: unknown architecture '{}'", s.arch);
  if (!s.q4_k_m && !ggml_type_quantizable(s.weight_type))
    fail("random model: cannot write {} weights (writable: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, "
         "Q5_K, Q6_K)", ggml_type_name(s.weight_type));
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

  // Vocabulary: 256 byte symbols, merges "t"+"h", "Ġ"+"t", "e"+"r", filler tokens up to n_vocab
  // ("<filler_N>", plain tokens no text encodes to), then the specials.
  std::vector<std::string> tokens = byte_level_symbols();
  const std::vector<std::string> merges = {"t h", "Ġ t", "e r"};
  for (const auto& m : merges) tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
  const std::vector<const char*> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  const int base_vocab = int(tokens.size() + specials.size());
  if (s.n_vocab != 0 && s.n_vocab < base_vocab)
    fail("random model: a vocabulary of {} tokens is smaller than the {} the byte-level tokenizer needs", s.n_vocab,
         base_vocab);
  for (int i = 0; int(tokens.size() + specials.size()) < s.n_vocab; ++i) tokens.push_back(fmt::format("<filler_{}>", i));
  std::vector<int32_t> types(tokens.size(), 1);
  for (const char* sp : specials) {
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

  // Tensor t draws from its own stream (stream_seed(seed, t)); matrices are made when the writer
  // reaches them, so only one is in memory at a time.
  uint64_t n_tensors = 0;
  int64_t total_weights = 0;
  std::unique_ptr<Progress> progress;  // made below, once the total is known
  int64_t done_weights = 0;
  auto matrix = [&](const std::string& name, int64_t in, int64_t out, int layer) {
    const std::string base = layer < 0 ? name : name.substr(name.find('.', 4) + 1);  // "blk.N." dropped
    const GgmlType type = random_model_matrix_type(s, base, layer);
    const int64_t block = ggml_block_elems(type);
    if (in % block != 0)
      fail("random model: {} has rows of {} values, not a multiple of {}'s {}-value blocks (choose other shapes or "
           "another weight type)", name, in, ggml_type_name(type), block);
    const uint64_t seed = stream_seed(s.seed, n_tensors++);
    const float stddev = 1.f / std::sqrt(float(in));
    total_weights += in * out;
    w.add_tensor_source(name, type, {in, out}, [&s, &progress, &done_weights, type, in, out, stddev, seed] {
      auto bytes = random_rows(type, in, out, stddev, seed, std::max(1, s.threads));
      done_weights += in * out;
      if (progress) progress->set(done_weights / 1000000);
      return bytes;
    });
  };
  auto norm = [&](const std::string& name, int64_t n) {
    std::mt19937_64 rng(stream_seed(s.seed, n_tensors++));
    std::uniform_real_distribution<float> dist(0.8f, 1.2f);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    w.add_tensor_f32(name, {n}, v);
  };
  matrix("token_embd.weight", s.n_embd, n_vocab, -1);
  norm("output_norm.weight", s.n_embd);
  if (s.separate_output) matrix("output.weight", s.n_embd, n_vocab, -1);
  for (int l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    norm(p + "attn_norm.weight", s.n_embd);
    matrix(p + "attn_q.weight", s.n_embd, q_dim, l);
    matrix(p + "attn_k.weight", s.n_embd, kv_dim, l);
    matrix(p + "attn_v.weight", s.n_embd, kv_dim, l);
    matrix(p + "attn_output.weight", q_dim, s.n_embd, l);
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
    matrix(p + "ffn_gate.weight", s.n_embd, s.n_ff, l);
    matrix(p + "ffn_up.weight", s.n_embd, s.n_ff, l);
    matrix(p + "ffn_down.weight", s.n_ff, s.n_embd, l);
  }
  if (s.progress) progress = std::make_unique<Progress>("writing " + path, total_weights / 1000000, "M weights");
  w.write(path);
  if (progress) progress->finish();
}

}  // namespace ragkv
