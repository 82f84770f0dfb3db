// Model: weight loading with shape checks and the transformer layer loop for llama, qwen2 and
// gemma3. The layer mirrors the reference implementations line by line:
//   llama/qwen2:  h = x + Wo·attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x));  x' = h + W2·(silu(W1·n(h)) ⊙ W3·n(h))
//   gemma3:       q,k get a per-head RMSNorm before RoPE; attention and FFN outputs get a
//                 post-norm before the residual add ("sandwich"); GeGLU; embeddings × √d.
#include "core/model/model.h"

#include <algorithm>

#include "core/util/error.h"

namespace ragkv {

void Workspace::ensure(Backend& b, const ModelConfig& c, int64_t n) {
  if (n <= rows) return;
  rows = 0;  // until every buffer is there: a failed allocation leaves none counted
  x = b.alloc(DType::f32, n, c.n_embd);
  xn = b.alloc(DType::f32, n, c.n_embd);
  q = b.alloc(DType::f32, n, c.q_dim());
  k = b.alloc(DType::f32, n, c.kv_dim());
  v = b.alloc(DType::f32, n, c.kv_dim());
  attn = b.alloc(DType::f32, n, c.q_dim());
  proj = b.alloc(DType::f32, n, c.n_embd);
  gate = b.alloc(DType::f32, n, c.n_ff);
  up = b.alloc(DType::f32, n, c.n_ff);
  rows = n;
}

Model::Model(const std::string& gguf_path, Backend& backend)
    : gguf_(std::make_unique<GgufFile>(gguf_path)), backend_(backend) {
  cfg_ = ModelConfig::from_gguf(*gguf_);
  tokenizer_ = Tokenizer::from_gguf(*gguf_);
  const ModelConfig& c = cfg_;
  const int64_t E = c.n_embd, Q = c.q_dim(), KV = c.kv_dim(), F = c.n_ff, D = c.head_dim;

  const GgufTensor& te = gguf_->tensor("token_embd.weight");
  if (te.ne.size() != 2 || te.ne[0] != E)
    fail("{}: expected token_embd.weight of shape [{}, n_vocab], got {}", gguf_path, E, te.shape_str());
  cfg_.n_vocab = int(te.ne[1]);
  tok_embd_ = load("token_embd.weight", {E, cfg_.n_vocab});
  output_norm_ = load("output_norm.weight", {E});
  // A separate head only meets products (kernel_layout); a tied one is also embed's table. A Q4_K
  // head's wide products read the file's rows (cpu-matmul.cpp), faulting them back in beside its
  // repacked copy: more memory for that rare mix (Q4_K_M heads are Q6_K), never a wrong product.
  output_ = load("output.weight", {E, cfg_.n_vocab}, /*required=*/false, WeightMemory::kernel_layout);
  // The logits keep wide activations (backend.h): with 8-bit ones SmolLM2's greedy answer to the
  // demo question flips (so does llama.cpp's on the same file); 16-bit blocks on a Q8_0 head
  // changed none of 80 answers and run at integer-product speed (bench/results, 2026-11-25).
  (output_ ? output_ : tok_embd_)->wide_activations = true;

  if (const GgufTensor* rf = gguf_->find_tensor("rope_freqs.weight")) {  // Llama-3 RoPE scaling
    if (rf->type != GgmlType::F32 || rf->n_elements() != c.rope_global.n_rot / 2)
      fail("{}: rope_freqs.weight: expected F32 [{}], got {} {}", gguf_path, c.rope_global.n_rot / 2,
           ggml_type_name(rf->type), rf->shape_str());
    const float* f = reinterpret_cast<const float*>(rf->data);
    cfg_.rope_global.freq_factors.assign(f, f + rf->n_elements());
    cfg_.rope_local.freq_factors = cfg_.rope_global.freq_factors;
  }

  layers_.resize(c.n_layer);
  for (int l = 0; l < c.n_layer; ++l) {
    LayerWeights& w = layers_[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    w.attn_norm = load(p + "attn_norm.weight", {E});
    w.wqkv = load_stack(p + "attn_qkv", {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"},
                        {{E, Q}, {E, KV}, {E, KV}});
    w.wo = load(p + "attn_output.weight", {Q, E}, true, WeightMemory::kernel_layout);
    if (c.qkv_bias) {
      w.bq = load(p + "attn_q.bias", {Q});
      w.bk = load(p + "attn_k.bias", {KV});
      w.bv = load(p + "attn_v.bias", {KV});
    }
    if (c.qk_norm) {
      w.q_norm = load(p + "attn_q_norm.weight", {D});
      w.k_norm = load(p + "attn_k_norm.weight", {D});
    }
    if (c.sandwich_norm) {
      w.post_attn_norm = load(p + "post_attention_norm.weight", {E});
      w.post_ffn_norm = load(p + "post_ffw_norm.weight", {E});
    }
    w.ffn_norm = load(p + "ffn_norm.weight", {E});
    w.w_gate_up = load_stack(p + "ffn_gate_up", {p + "ffn_gate.weight", p + "ffn_up.weight"}, {{E, F}, {E, F}});
    w.w_down = load(p + "ffn_down.weight", {F, E}, true, WeightMemory::kernel_layout);
  }
}

Model::~Model() = default;

const GgufTensor* Model::checked(const std::string& name, const std::vector<int64_t>& shape, bool required) const {
  const GgufTensor* t = gguf_->find_tensor(name);
  if (!t) {
    if (required) fail("{}: tensor '{}' is missing from the model file", gguf_->path(), name);
    return nullptr;
  }
  if (t->ne != shape) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    fail("{}: expected {}] for {}, got {}", gguf_->path(), want, name, t->shape_str());
  }
  return t;
}

// Weights are used where they lie in the mapped file (gguf_ outlives them: members are destroyed
// in reverse order).
// The backend's refusals (a tensor type it cannot compute with) name the tensor, not the file:
// the file is added here (found by fuzzing).
std::unique_ptr<Weight> Model::load(const std::string& name, std::vector<int64_t> shape, bool required,
                                    WeightMemory mem) {
  const GgufTensor* t = checked(name, shape, required);
  if (!t) return nullptr;
  try {
    return backend_.load_weight(*t, mem);
  } catch (const Error& e) {
    fail("{}: {}", gguf_->path(), e.what());
  }
}

std::unique_ptr<Weight> Model::load_stack(const std::string& name, const std::vector<std::string>& parts,
                                          const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<const GgufTensor*> ts;
  for (size_t i = 0; i < parts.size(); ++i) ts.push_back(checked(parts[i], shapes[i]));
  try {
    return backend_.load_weight_stack(ts, name, WeightMemory::kernel_layout);  // stacks only meet products
  } catch (const Error& e) {
    fail("{}: {}", gguf_->path(), e.what());
  }
}

void Model::embed(std::span<const int32_t> ids, Workspace& ws) const {
  ws.ensure(backend_, cfg_, int64_t(ids.size()));
  backend_.embed(*tok_embd_, ids, ws.x.slice_rows(0, int64_t(ids.size())), cfg_.embd_scale);
  ws.xn_layer = -1;
}

void Model::layer_qkv(int l, int64_t n, std::span<const int32_t> pos, Workspace& ws, const KvCache* kv,
                      std::span<const int32_t> kv_rows) const {
  const LayerWeights& w = layers_[l];
  const ModelConfig& c = cfg_;
  Backend& b = backend_;
  const Tensor x = ws.x.slice_rows(0, n), xn = ws.xn.slice_rows(0, n);
  const Tensor q = ws.q.slice_rows(0, n), k = ws.k.slice_rows(0, n), v = ws.v.slice_rows(0, n);
  if (ws.xn_layer != l || ws.xn_rows != n) b.rms_norm(x, *w.attn_norm, c.norm_eps, xn);  // else fused before
  ws.xn_layer = -1;
  const Tensor qkv[3] = {q, k, v};
  const Weight* biases[3] = {w.bq.get(), w.bk.get(), w.bv.get()};
  if (kv && !c.qk_norm) {  // the products, rotation and scatter as one op (fused on the CUDA decode path)
    b.qkv_rope_scatter_kv(xn, *w.wqkv, qkv, biases, ws.act, pos, c.n_head, c.n_head_kv, c.head_dim, c.rope(l),
                          kv->k[l], kv->v[l], kv_rows);
    return;
  }
  b.matmul_parts(xn, *w.wqkv, qkv, biases, ws.act);
  if (c.qk_norm) {
    b.rms_norm(q.reshape(n * c.n_head, c.head_dim), *w.q_norm, c.norm_eps, q.reshape(n * c.n_head, c.head_dim));
    b.rms_norm(k.reshape(n * c.n_head_kv, c.head_dim), *w.k_norm, c.norm_eps, k.reshape(n * c.n_head_kv, c.head_dim));
  }
  if (kv) b.rope_qk_scatter_kv(q, k, v, pos, c.n_head, c.n_head_kv, c.head_dim, c.rope(l), kv->k[l], kv->v[l], kv_rows);
  else b.rope_qk(q, k, pos, c.n_head, c.n_head_kv, c.head_dim, c.rope(l));
}

void Model::layer_attend_ffn(int l, int64_t n, std::span<const int32_t> pos, const KvCache& kv,
                             int64_t n_kv, Workspace& ws, SegmentMass* seg_mass) const {
  layer_attention(l, 0, n, pos, kv, n_kv, ws, seg_mass, /*projected_next=*/true);
  layer_output_ffn(l, n, ws);
}

void Model::layer_attention(int l, int64_t first, int64_t n, std::span<const int32_t> pos, const KvCache& kv,
                            int64_t n_kv, Workspace& ws, SegmentMass* seg_mass, bool projected_next) const {
  if (projected_next && first != 0) fail("internal: layer_attention: rows from {} are not projected next", first);
  const NextProduct next = projected_next ? NextProduct{layers_[l].wo.get(), ws.act} : NextProduct{};
  backend_.attention(ws.q.slice_rows(first, n), pos, kv.k[l], kv.v[l], std::span(kv.pos).first(n_kv), n_kv,
                     cfg_.attention(l), ws.attn.slice_rows(first, n), seg_mass, next);
}

void Model::layer_output_ffn(int l, int64_t n, Workspace& ws) const {
  const LayerWeights& w = layers_[l];
  const ModelConfig& c = cfg_;
  Backend& b = backend_;
  const Tensor x = ws.x.slice_rows(0, n), xn = ws.xn.slice_rows(0, n), proj = ws.proj.slice_rows(0, n);
  b.matmul(ws.attn.slice_rows(0, n), *w.wo, proj, nullptr, ws.act);
  if (c.sandwich_norm) b.rms_norm(proj, *w.post_attn_norm, c.norm_eps, proj);
  b.add_rms_norm(x, proj, *w.ffn_norm, c.norm_eps, xn, {w.w_gate_up.get(), ws.act, /*gated=*/true});  // x += proj; xn = norm(x)

  b.glu_ffn(xn, *w.w_gate_up, *w.w_down, ws.gate.slice_rows(0, n), ws.up.slice_rows(0, n), proj, c.gelu, ws.act);
  if (c.sandwich_norm) b.rms_norm(proj, *w.post_ffn_norm, c.norm_eps, proj);
  if (l + 1 < c.n_layer) {  // the residual add and the next layer's attention norm in one pass
    const LayerWeights& next = layers_[size_t(l) + 1];
    b.add_rms_norm(x, proj, *next.attn_norm, c.norm_eps, xn, {next.wqkv.get(), ws.act});
    ws.xn_layer = l + 1;
    ws.xn_rows = n;
  } else {
    b.add(x, proj);
  }
}

std::vector<float> Model::logits(int64_t first, int64_t n, Workspace& ws) const {
  const Tensor xn = ws.xn.slice_rows(0, n);
  ws.xn_layer = -1;  // xn is overwritten below
  backend_.rms_norm(ws.x.slice_rows(first, n), *output_norm_, cfg_.norm_eps, xn);
  if (ws.logit_rows < n || ws.logits.cols != cfg_.n_vocab) {
    ws.logits = backend_.alloc(DType::f32, n, cfg_.n_vocab);
    ws.logit_rows = n;
  }
  const Tensor out = ws.logits.slice_rows(0, n);
  backend_.matmul(xn, output_ ? *output_ : *tok_embd_, out);
  std::vector<float> host(static_cast<size_t>(n * cfg_.n_vocab));
  backend_.download(out, host.data());
  return host;
}

std::vector<float> Model::forward(std::span<const int32_t> ids, KvCache& kv, Workspace& ws,
                                  int64_t ubatch) const {
  if (ids.empty()) fail("internal: forward of an empty token sequence");
  if (kv.n_used + int64_t(ids.size()) > kv.n_ctx)
    fail("the prompt needs {} tokens but the context holds {}", kv.n_used + ids.size(), kv.n_ctx);
  if (ubatch <= 0) ubatch = backend_.prefill_rows();
  std::vector<float> last;
  for (size_t start = 0; start < ids.size(); start += size_t(ubatch)) {
    const int64_t n = std::min<int64_t>(ubatch, int64_t(ids.size() - start));
    std::vector<int32_t> pos(n), rows(n);
    for (int64_t i = 0; i < n; ++i) {
      rows[i] = int32_t(kv.n_used + i);
      pos[i] = rows[i];
      kv.pos[rows[i]] = pos[i];
    }
    embed(ids.subspan(start, n), ws);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      layer_qkv(l, n, pos, ws, &kv, rows);  // and the new K and V rows into the cache
      layer_attend_ffn(l, n, pos, kv, kv.n_used + n, ws);
    }
    kv.n_used += n;
    if (start + n == ids.size()) last = logits(n - 1, 1, ws);  // only the last row is needed
  }
  return last;
}

std::vector<float> Model::decode_step(std::span<const int32_t> ids, std::span<KvCache* const> kvs,
                                      Workspace& ws) const {
  const int64_t n = int64_t(ids.size());
  if (n == 0 || kvs.size() != ids.size()) fail("internal: decode step of {} ids for {} sequences", ids.size(), kvs.size());
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    KvCache& kv = *kvs[i];
    if (kv.n_used + 1 > kv.n_ctx) fail("internal: a decode step past the context of {} rows", kv.n_ctx);
    pos[i] = int32_t(kv.n_used);
    kv.pos[kv.n_used] = pos[i];
  }
  // Decode reads every weight for a few rows: 8-bit activation blocks and integer dot products
  // (backend.h, Activations::block8), the head excepted (it keeps f32, see the constructor).
  struct ActScope {
    Workspace& ws;
    Activations saved;
    ~ActScope() { ws.act = saved; }
  } scope{ws, ws.act};
  ws.act = Activations::block8;
  // Repeatable (Backend::begin_step): the host state moves on only after the step.
  const auto layers = [&] {
    embed(ids, ws);
    for (int l = 0; l < cfg_.n_layer; ++l) {
      if (n == 1) {  // one sequence: its new K/V row written with the rotation
        const int32_t row[1] = {int32_t(kvs[0]->n_used)};
        layer_qkv(l, 1, pos, ws, kvs[0], row);
        layer_attention(l, 0, 1, pos, *kvs[0], kvs[0]->n_used + 1, ws, nullptr, /*projected_next=*/true);
      } else {
        layer_qkv(l, n, pos, ws);
        for (int64_t i = 0; i < n; ++i) {  // each sequence's new K/V row, then its attention alone
          KvCache& kv = *kvs[i];
          const int32_t row[1] = {int32_t(kv.n_used)};
          backend_.scatter_kv_rows(ws.k.slice_rows(i, 1), ws.v.slice_rows(i, 1), kv.k[l], kv.v[l], row);
          layer_attention(l, i, 1, std::span(pos).subspan(i, 1), kv, kv.n_used + 1, ws);
        }
      }
      layer_output_ffn(l, n, ws);
    }
  };
  if (backend_.begin_step()) {  // recorded and launched as one unit; unrecorded where that fails
    bool launched = false;
    try {
      layers();
      launched = backend_.end_step();
    } catch (const std::exception&) {
      backend_.abort_step();
    }
    if (!launched) layers();
  } else {
    layers();
  }
  for (KvCache* kv : kvs) ++kv->n_used;
  return logits(0, n, ws);
}

}  // namespace ragkv
