// BERT sentence embedder: config and weights from a Hugging Face folder, the encoder layer loop
// on a Backend, mean pooling and L2 normalisation on the host. See embedder.h.
#include "core/model/embedder.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/util/error.h"
#include "core/format/safetensors.h"
#include "core/format/checksum.h"
#include "core/util/file-io.h"
#include "core/util/json-files.h"

namespace ragkv {

namespace {

int json_int(const nlohmann::json& j, const char* key, const std::filesystem::path& path) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0 ||
      j[key].get<int64_t>() > (int64_t(1) << 30))
    fail("{}: '{}' must be a positive integer", path.string(), key);
  return int(j[key].get<int64_t>());
}

BertConfig read_config(const std::filesystem::path& path) {
  const nlohmann::json j = read_json_file(path);
  if (!j.is_object()) fail("{}: expected a JSON object", path.string());
  const std::string type = j.value("model_type", "");
  if (type != "bert")
    fail("{}: model_type '{}' is not supported by the embedder (expected \"bert\")", path.string(), type);
  const std::string act = j.value("hidden_act", "gelu");
  if (act != "gelu")
    fail("{}: hidden_act '{}' is not supported (expected \"gelu\", the erf form)", path.string(), act);
  const std::string pos = j.value("position_embedding_type", "absolute");
  if (pos != "absolute")
    fail("{}: position_embedding_type '{}' is not supported (expected \"absolute\")", path.string(), pos);
  BertConfig c;
  c.n_vocab = json_int(j, "vocab_size", path);
  c.n_embd = json_int(j, "hidden_size", path);
  c.n_layer = json_int(j, "num_hidden_layers", path);
  c.n_head = json_int(j, "num_attention_heads", path);
  c.n_ff = json_int(j, "intermediate_size", path);
  c.n_pos = json_int(j, "max_position_embeddings", path);
  c.n_type = json_int(j, "type_vocab_size", path);
  if (j.contains("layer_norm_eps")) {
    if (!j["layer_norm_eps"].is_number()) fail("{}: 'layer_norm_eps' must be a number", path.string());
    c.eps = j["layer_norm_eps"].get<float>();
  }
  if (c.n_embd % c.n_head != 0)
    fail("{}: hidden_size {} is not a multiple of num_attention_heads {}", path.string(), c.n_embd, c.n_head);
  return c;
}

// XXH64 of a file's bytes, fed into a running checksum (with its size, so files cannot run
// into each other).
void hash_file(Checksum64& h, const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return;
  const std::string bytes = read_file(path);
  const uint64_t n = bytes.size();
  h.update(&n, sizeof n);
  h.update(bytes);
}

}  // namespace

void Embedder::load(const std::filesystem::path& dir, Backend& backend) {
  if (!std::filesystem::is_directory(dir))
    fail("{}: embedding model folder not found (run `make setup`, or pass --embedder DIR)", dir.string());
  BertConfig cfg = read_config(dir / "config.json");
  auto tok = std::make_unique<WordPieceTokenizer>(WordPieceTokenizer::load(dir));
  if (tok->vocab_size() > size_t(cfg.n_vocab))
    fail("{}: vocab.txt has {} tokens but config.json's vocab_size is {}", dir.string(), tok->vocab_size(),
         cfg.n_vocab);
  if (tok->config().max_seq_length > cfg.n_pos)
    fail("{}: max_seq_length {} exceeds the model's {} position embeddings", dir.string(),
         tok->config().max_seq_length, cfg.n_pos);

  const SafetensorsFile st((dir / "model.safetensors").string());
  // Checkpoints of BertFor* heads prefix the encoder's tensors with "bert.".
  const std::string pre = st.find("embeddings.word_embeddings.weight") == nullptr &&
                                  st.find("bert.embeddings.word_embeddings.weight") != nullptr
                              ? "bert."
                              : "";
  auto load = [&](const std::string& name, std::vector<int64_t> shape) {
    const GgufTensor view = st.weight_view(pre + name, shape);
    try {
      return backend.load_weight(view);
    } catch (const Error& e) {  // the backend names the tensor, not the file
      fail("{}: {}", st.path(), e.what());
    }
  };
  const int64_t d = cfg.n_embd, ff = cfg.n_ff;
  BertWeights w;
  w.tok_embd = load("embeddings.word_embeddings.weight", {cfg.n_vocab, d});
  w.pos_embd = load("embeddings.position_embeddings.weight", {cfg.n_pos, d});
  w.type_embd = load("embeddings.token_type_embeddings.weight", {cfg.n_type, d});
  w.embd_ln_w = load("embeddings.LayerNorm.weight", {d});
  w.embd_ln_b = load("embeddings.LayerNorm.bias", {d});
  for (int il = 0; il < cfg.n_layer; ++il) {
    const std::string p = "encoder.layer." + std::to_string(il) + ".";
    BertLayerWeights l;
    l.wq = load(p + "attention.self.query.weight", {d, d});
    l.bq = load(p + "attention.self.query.bias", {d});
    l.wk = load(p + "attention.self.key.weight", {d, d});
    l.bk = load(p + "attention.self.key.bias", {d});
    l.wv = load(p + "attention.self.value.weight", {d, d});
    l.bv = load(p + "attention.self.value.bias", {d});
    l.wo = load(p + "attention.output.dense.weight", {d, d});
    l.bo = load(p + "attention.output.dense.bias", {d});
    l.ln1_w = load(p + "attention.output.LayerNorm.weight", {d});
    l.ln1_b = load(p + "attention.output.LayerNorm.bias", {d});
    l.w_up = load(p + "intermediate.dense.weight", {ff, d});
    l.b_up = load(p + "intermediate.dense.bias", {ff});
    l.w_down = load(p + "output.dense.weight", {d, ff});
    l.b_down = load(p + "output.dense.bias", {d});
    l.ln2_w = load(p + "output.LayerNorm.weight", {d});
    l.ln2_b = load(p + "output.LayerNorm.bias", {d});
    w.layers.push_back(std::move(l));
  }

  // Fingerprint: every byte that decides the vectors (weights, tokenizer, configs).
  Checksum64 h;
  h.update(st.header());
  {
    const auto& t = st.tensors();
    // The data section, from the first tensor byte to the end of the file.
    const uint8_t* lo = nullptr;
    const uint8_t* hi = nullptr;
    for (const auto& x : t) {
      if (!lo || x.data < lo) lo = x.data;
      if (!hi || x.data + x.nbytes > hi) hi = x.data + x.nbytes;
    }
    if (lo) h.update(lo, size_t(hi - lo));
  }
  for (const char* f : {"config.json", "vocab.txt", "tokenizer_config.json", "sentence_bert_config.json"})
    hash_file(h, dir / f);
  config_ = cfg;
  weights_ = std::move(w);
  tokenizer_ = std::move(tok);
  // Content only: the same files in another folder are the same embedder.
  fingerprint_ = "bert:" + checksum_hex(h.digest());
  backend_ = &backend;
}

std::vector<float> Embedder::embed(const std::vector<std::string>& texts,
                                   const std::function<void(size_t)>& progress) {
  if (!backend_) fail("internal: Embedder::embed before load");
  std::vector<std::vector<int32_t>> ids(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) ids[i] = tokenizer_->encode(texts[i]);
  return embed_ids(ids, progress);
}

std::vector<float> Embedder::embed_ids(const std::vector<std::vector<int32_t>>& ids,
                                       const std::function<void(size_t)>& progress) {
  if (!backend_) fail("internal: Embedder::embed_ids before load");
  const size_t n = ids.size();
  const int64_t dm = config_.n_embd;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i].empty()) fail("internal: embedding an empty token sequence (text {})", i);
    if (int64_t(ids[i].size()) > config_.n_pos)
      fail("text {} has {} tokens, more than the model's {} positions", i, ids[i].size(), config_.n_pos);
  }
  // Longest first, so each batch holds sentences of similar length and the budget fills evenly.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() > ids[b].size(); });

  std::vector<float> out(n * size_t(dm));
  std::vector<float> rows;
  std::vector<const std::vector<int32_t>*> batch;
  size_t done = 0;
  for (size_t i = 0; i < n;) {
    batch.clear();
    int64_t tokens = 0;
    while (i + batch.size() < n) {
      const auto* s = &ids[order[i + batch.size()]];
      if (!batch.empty() && tokens + int64_t(s->size()) > kBatchTokens) break;
      batch.push_back(s);
      tokens += int64_t(s->size());
    }
    rows.resize(batch.size() * size_t(dm));
    forward(batch, rows.data());
    for (size_t b = 0; b < batch.size(); ++b)
      std::copy_n(rows.data() + b * size_t(dm), dm, out.data() + order[i + b] * size_t(dm));
    i += batch.size();
    done += batch.size();
    if (progress) progress(done);
  }
  return out;
}

// The encoder over one packed batch (post-LayerNorm BERT, Devlin et al. 2019 / Vaswani et al.
// 2017 §3.1): rows of all sentences side by side, attention per sentence, then mean pooling and
// L2 normalisation per sentence (sentence-transformers' Pooling + Normalize).
void Embedder::forward(std::span<const std::vector<int32_t>* const> seqs, float* out) {
  Backend& be = *backend_;
  const BertConfig& c = config_;
  const int64_t dm = c.n_embd, hd = c.n_embd / c.n_head;

  std::vector<int32_t> ids, pos;  // [n_tok]: token id, position inside its sentence
  std::vector<int64_t> begin;     // [n_seq + 1]: first row of each sentence
  for (const auto* s : seqs) {
    begin.push_back(int64_t(ids.size()));
    ids.insert(ids.end(), s->begin(), s->end());
    for (size_t p = 0; p < s->size(); ++p) pos.push_back(int32_t(p));
  }
  begin.push_back(int64_t(ids.size()));
  const int64_t n_tok = int64_t(ids.size());
  const std::vector<int32_t> type_ids(ids.size(), 0);  // one segment: token type 0

  Tensor x = be.alloc(DType::f32, n_tok, dm);     // f32 [n_tok][n_embd] hidden state
  Tensor t = be.alloc(DType::f32, n_tok, dm);     // f32 [n_tok][n_embd] scratch
  Tensor q = be.alloc(DType::f32, n_tok, dm);     // f32 [n_tok][n_head·head_dim]
  Tensor k = be.alloc(DType::f32, n_tok, dm);     // f32 [n_tok][n_head·head_dim]
  Tensor v = be.alloc(DType::f32, n_tok, dm);     // f32 [n_tok][n_head·head_dim]
  Tensor att = be.alloc(DType::f32, n_tok, dm);   // f32 [n_tok][n_head·head_dim]
  Tensor h = be.alloc(DType::f32, n_tok, c.n_ff); // f32 [n_tok][n_ff]

  // Embeddings: word + position + token type, then LayerNorm.
  be.embed(*weights_.tok_embd, ids, x, 1.f);
  be.embed(*weights_.pos_embd, pos, t, 1.f);
  be.add(x, t);
  be.embed(*weights_.type_embd, type_ids, t, 1.f);
  be.add(x, t);
  be.layer_norm(x, *weights_.embd_ln_w, *weights_.embd_ln_b, c.eps, x);

  AttentionParams ap;
  ap.n_head = c.n_head;
  ap.n_kv_head = c.n_head;
  ap.head_dim = int(hd);
  ap.scale = 1.f / std::sqrt(float(hd));
  ap.causal = false;

  for (const BertLayerWeights& l : weights_.layers) {
    // Self-attention, bidirectional inside each sentence.
    be.matmul(x, *l.wq, q, l.bq.get());
    be.matmul(x, *l.wk, k, l.bk.get());
    be.matmul(x, *l.wv, v, l.bv.get());
    for (size_t s = 0; s + 1 < begin.size(); ++s) {
      const int64_t b0 = begin[s], len = begin[s + 1] - begin[s];
      const std::span<const int32_t> p(pos.data() + b0, size_t(len));
      be.attention(q.slice_rows(b0, len), p, k.slice_rows(b0, len), v.slice_rows(b0, len), p, len, ap,
                   att.slice_rows(b0, len));
    }
    be.matmul(att, *l.wo, t, l.bo.get());
    be.add(t, x);
    be.layer_norm(t, *l.ln1_w, *l.ln1_b, c.eps, x);  // x = LN(x + attn)
    // Feed-forward with exact GELU.
    be.matmul(x, *l.w_up, h, l.b_up.get());
    be.gelu_erf(h, h);
    be.matmul(h, *l.w_down, t, l.b_down.get());
    be.add(t, x);
    be.layer_norm(t, *l.ln2_w, *l.ln2_b, c.eps, x);  // x = LN(x + ffn)
  }

  // Mean pooling over each sentence's tokens (no padding: every row counts), then L2 norm.
  std::vector<float> hidden(size_t(n_tok * dm));
  be.download(x, hidden.data());
  for (size_t s = 0; s + 1 < begin.size(); ++s) {
    std::vector<double> acc(size_t(dm), 0.0);
    for (int64_t r = begin[s]; r < begin[s + 1]; ++r)
      for (int64_t j = 0; j < dm; ++j) acc[j] += hidden[size_t(r * dm + j)];
    const double len = double(begin[s + 1] - begin[s]);
    double ss = 0;
    for (double& a : acc) {
      a /= len;
      ss += a * a;
    }
    // sentence-transformers' Normalize: v / max(‖v‖, 1e-12).
    const double inv = 1.0 / std::max(std::sqrt(ss), 1e-12);
    for (int64_t j = 0; j < dm; ++j) out[s * size_t(dm) + size_t(j)] = float(acc[j] * inv);
  }
}

}  // namespace ragkv
