// A transformer LLM loaded from GGUF onto a backend: weights fetched by name with their expected
// shapes, and the layer loop, exposed one layer at a time so callers (the fusor) can step it
// and choose which rows are active in each layer.
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "core/format/gguf.h"
#include "core/model/kv-cache.h"
#include "core/model/model-config.h"
#include "core/model/tokenizer.h"

namespace ragkv {

// Q, K and V are one stacked weight (one product computes the three), as are gate and up; each
// part keeps its file type (a Q4_K_M file mixes Q5_0, Q8_0, Q4_K and Q6_K).
struct LayerWeights {
  std::unique_ptr<Weight> attn_norm, wqkv, wo;   // wqkv: [q_dim + 2 kv_dim][n_embd]
  std::unique_ptr<Weight> bq, bk, bv;            // qwen2
  std::unique_ptr<Weight> q_norm, k_norm;        // gemma3 QK-norm, [head_dim]
  std::unique_ptr<Weight> post_attn_norm;        // gemma3 sandwich norms
  std::unique_ptr<Weight> ffn_norm, w_gate_up, w_down;  // w_gate_up: [2 n_ff][n_embd]
  std::unique_ptr<Weight> post_ffn_norm;
};

// Scratch activations for up to `rows` active rows; reused across layers and calls.
struct Workspace {
  int64_t rows = 0;
  Tensor x;      // f32 [rows][n_embd]  residual stream of the active rows
  Tensor xn;     // f32 [rows][n_embd]  normed input
  Tensor q;      // f32 [rows][n_head * head_dim]
  Tensor k, v;   // f32 [rows][n_head_kv * head_dim]
  Tensor attn;   // f32 [rows][n_head * head_dim]
  Tensor proj;   // f32 [rows][n_embd]
  Tensor gate, up;  // f32 [rows][n_ff]
  // f32 [logit_rows][n_vocab]: logits()'s product, kept between calls (a decode step would
  // otherwise allocate and free it every token: on the GPU a cudaMalloc and a cudaFree per step).
  Tensor logits;
  int64_t logit_rows = 0;
  // xn rows [0, xn_rows) already hold layer xn_layer's attention-norm input: the previous layer's
  // last residual add computed it in the same pass (Backend::add_rms_norm). -1: they do not.
  int xn_layer = -1;
  int64_t xn_rows = 0;
  // The layers' products' activations (backend.h): f32 for prompts; decode_step uses block8 for
  // its own calls and restores this.
  Activations act = Activations::f32;
  void ensure(Backend& b, const ModelConfig& c, int64_t n);
};

class Model {
 public:
  Model(const std::string& gguf_path, Backend& backend);
  ~Model();

  const ModelConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const GgufFile& gguf() const { return *gguf_; }
  Backend& backend() const { return backend_; }

  // ---- layer-stepping API (all tensors on the model's backend)
  // ws.x[0..n) = scaled token embeddings of ids.
  void embed(std::span<const int32_t> ids, Workspace& ws) const;
  // Attention input of layer l for the n active rows in ws.x: ws.q (RoPE applied), ws.k (RoPE
  // applied) and ws.v for positions pos. With kv, ws.k's and ws.v's rows are also written to rows
  // kv_rows of kv's layer l (Backend::rope_qk_scatter_kv: with the rotation, in one pass).
  void layer_qkv(int l, int64_t n, std::span<const int32_t> pos, Workspace& ws, const KvCache* kv = nullptr,
                 std::span<const int32_t> kv_rows = {}) const;
  // The rest of layer l: attention of ws.q against KV rows [0, n_kv) of kv, output projection,
  // residual, FFN, residual; updates ws.x in place (and, but after the last layer, ws.xn with the
  // next layer's attention-norm input, which that layer's layer_qkv on the same rows uses).
  void layer_attend_ffn(int l, int64_t n, std::span<const int32_t> pos, const KvCache& kv,
                        int64_t n_kv, Workspace& ws, SegmentMass* seg_mass = nullptr) const;
  // layer_attend_ffn in two halves: attention of ws.q rows [first, first + n) at positions pos
  // into the same rows of ws.attn; then, for rows [0, n), the output projection, residual, FFN.
  // projected_next: layer_output_ffn on those n rows (first 0) comes next — the backend is told
  // (Backend::attention's NextProduct).
  void layer_attention(int l, int64_t first, int64_t n, std::span<const int32_t> pos, const KvCache& kv,
                       int64_t n_kv, Workspace& ws, SegmentMass* seg_mass = nullptr,
                       bool projected_next = false) const;
  void layer_output_ffn(int l, int64_t n, Workspace& ws) const;
  // logits [n][n_vocab] (f32, host) of rows [first, first + n) of ws.x after the final norm.
  std::vector<float> logits(int64_t first, int64_t n, Workspace& ws) const;

  // ---- whole-sequence helpers
  // Appends ids at positions kv.n_used.. (rows likewise), in micro-batches of ubatch tokens (0:
  // the backend's prefill_rows()); returns the logits of the last token.
  std::vector<float> forward(std::span<const int32_t> ids, KvCache& kv, Workspace& ws,
                             int64_t ubatch = 0) const;
  KvCache new_kv_cache(int64_t n_ctx) const { return KvCache::create(backend_, cfg_, n_ctx); }
  // One decode step of several sequences together: ids[i] is appended to *kvs[i] at position
  // kvs[i]->n_used. Returns logits [ids.size()][n_vocab] (f32, host). Every op works row by row
  // and attention per sequence, so each sequence gets exactly what it would get alone, while
  // each weight is read once per step for all of them.
  std::vector<float> decode_step(std::span<const int32_t> ids, std::span<KvCache* const> kvs, Workspace& ws) const;

 private:
  std::unique_ptr<GgufFile> gguf_;
  Backend& backend_;
  ModelConfig cfg_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<Weight> tok_embd_, output_norm_, output_;  // output_ null: tied to tok_embd_
  std::vector<LayerWeights> layers_;

  // The tensor `name` after checking its shape (ne order); null when missing and not required.
  const GgufTensor* checked(const std::string& name, const std::vector<int64_t>& shape, bool required = true) const;
  // The weights lie in the mapped file (in_place); kernel_layout for weights that only meet products
  // (backend.h), which a backend may keep in its kernels' layout.
  std::unique_ptr<Weight> load(const std::string& name, std::vector<int64_t> shape, bool required = true,
                               WeightMemory mem = WeightMemory::in_place);
  std::unique_ptr<Weight> load_stack(const std::string& name, const std::vector<std::string>& parts,
                                     const std::vector<std::vector<int64_t>>& shapes);
};

}  // namespace ragkv
