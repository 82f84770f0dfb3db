// Sentence embedder (DESIGN.md §5): a BERT-family encoder (all-MiniLM-L6-v2 by default) run on
// the project's own backends, then mean pooling over the tokens and L2 normalisation, as
// sentence-transformers computes it. Loaded from a Hugging Face / sentence-transformers folder:
// config.json, model.safetensors, vocab.txt, tokenizer_config.json, sentence_bert_config.json.
//
// Batching: sentences are sorted by token count and packed, without padding, into batches of at
// most kBatchTokens tokens; every projection and FFN runs once per batch over all its rows, and
// attention runs per sentence (non-causal, keys = that sentence's tokens only), so a sentence's
// embedding does not depend on what it is batched with beyond float rounding in the GEMMs.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/model/wordpiece.h"

namespace ragkv {

// Hyper-parameters of a BERT encoder (config.json).
struct BertConfig {
  int n_vocab = 0;       // vocab_size
  int n_embd = 0;        // hidden_size
  int n_layer = 0;       // num_hidden_layers
  int n_head = 0;        // num_attention_heads
  int n_ff = 0;          // intermediate_size
  int n_pos = 0;         // max_position_embeddings
  int n_type = 0;        // type_vocab_size
  float eps = 1e-12f;    // layer_norm_eps
};

// Read-only weights on the backend; names as in the Hugging Face BertModel checkpoint.
struct BertLayerWeights {
  // attention.self.{query,key,value}: weights [n_embd][n_embd], biases [n_embd]
  std::unique_ptr<Weight> wq, bq, wk, bk, wv, bv;
  std::unique_ptr<Weight> wo, bo;                  // attention.output.dense: [n_embd][n_embd], [n_embd]
  std::unique_ptr<Weight> ln1_w, ln1_b;            // attention.output.LayerNorm: [n_embd]
  std::unique_ptr<Weight> w_up, b_up;              // intermediate.dense: [n_ff][n_embd], [n_ff]
  std::unique_ptr<Weight> w_down, b_down;          // output.dense: [n_embd][n_ff], [n_embd]
  std::unique_ptr<Weight> ln2_w, ln2_b;            // output.LayerNorm: [n_embd]
};

struct BertWeights {
  std::unique_ptr<Weight> tok_embd;    // embeddings.word_embeddings: [n_vocab][n_embd]
  std::unique_ptr<Weight> pos_embd;    // embeddings.position_embeddings: [n_pos][n_embd]
  std::unique_ptr<Weight> type_embd;   // embeddings.token_type_embeddings: [n_type][n_embd]
  std::unique_ptr<Weight> embd_ln_w, embd_ln_b;  // embeddings.LayerNorm: [n_embd]
  std::vector<BertLayerWeights> layers;
};

class Embedder {
 public:
  static constexpr int64_t kBatchTokens = 4096;  // rows per forward pass (activations ~ 60 MB f32)

  Embedder() = default;
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  // Loads the model folder onto `backend` (which must outlive this embedder). Errors name the
  // file and, for weights, the tensor and its expected shape.
  void load(const std::filesystem::path& dir, Backend& backend);
  bool loaded() const { return backend_ != nullptr; }

  // Embeddings of the texts, row-major [texts.size()][dim()], each row of unit L2 norm (an
  // empty text is embedded as "[CLS] [SEP]", like the reference). progress, when given, is
  // called with the number of texts done after every batch.
  std::vector<float> embed(const std::vector<std::string>& texts,
                           const std::function<void(size_t done)>& progress = {});
  // The same from token ids ([CLS] ... [SEP], as tokenizer().encode() makes them).
  std::vector<float> embed_ids(const std::vector<std::vector<int32_t>>& ids,
                               const std::function<void(size_t done)>& progress = {});

  int dim() const { return config_.n_embd; }
  const BertConfig& config() const { return config_; }
  const WordPieceTokenizer& tokenizer() const { return *tokenizer_; }
  // "<folder name>:<16 hex digits>": XXH64 over model.safetensors and the tokenizer and config
  // files, so an index records exactly which embedder produced its vectors.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  Backend* backend_ = nullptr;
  BertConfig config_;
  BertWeights weights_;
  std::unique_ptr<WordPieceTokenizer> tokenizer_;
  std::string fingerprint_;

  // One packed batch: seqs[i] is the ids of sentence i; writes the pooled, normalised rows.
  void forward(std::span<const std::vector<int32_t>* const> seqs, float* out);
};

}  // namespace ragkv
