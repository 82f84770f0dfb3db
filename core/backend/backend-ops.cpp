// The public ops of Backend (backend.h): each checks its arguments against the contract written
// beside it in backend.h, asks supports(), then calls the backend's *_impl. Checks that hold for
// every backend live here once; a backend keeps only its own (the CUDA backend's grid and cuBLAS
// int limits, the storage it chose for a weight).
#include <algorithm>
#include <cstdint>

#include "core/backend/backend.h"
#include "core/format/gguf.h"
#include "core/format/quant.h"
#include "core/util/enum-names.h"
#include "core/util/error.h"

namespace ragkv {

namespace {

constexpr EnumNames<BackendOp, 13> kOpNames{{{
    {BackendOp::embed, "embed"},
    {BackendOp::matmul, "matmul"},
    {BackendOp::rms_norm, "rms_norm"},
    {BackendOp::rope, "rope"},
    {BackendOp::layer_norm, "layer_norm"},
    {BackendOp::gelu_erf, "gelu_erf"},
    {BackendOp::swiglu, "swiglu"},
    {BackendOp::geglu, "geglu"},
    {BackendOp::add, "add"},
    {BackendOp::scatter_rows, "scatter_rows"},
    {BackendOp::gather_rows, "gather_rows"},
    {BackendOp::row_sq_dist, "row_sq_dist"},
    {BackendOp::attention, "attention"},
}}};

// "[rows][cols] f32"
std::string shape_of(const Tensor& t) { return fmt::format("[{}][{}] {}", t.rows, t.cols, dtype_name(t.dtype)); }

void check_dtype(const Tensor& t, DType want, const char* op, const char* what) {
  if (t.dtype != want)
    fail("internal: {} expects {} in {}, got {} {}", op, what, dtype_name(want), what, shape_of(t));
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.rows != b.rows || a.cols != b.cols)
    fail("internal: {}: shapes [{}][{}] and [{}][{}] differ", op, a.rows, a.cols, b.rows, b.cols);
}

bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.empty() || b.empty()) return false;
  const auto a0 = reinterpret_cast<uintptr_t>(a.data()), b0 = reinterpret_cast<uintptr_t>(b.data());
  return a0 < b0 + b.bytes() && b0 < a0 + a.bytes();
}

// Error when `out` overlaps `in` (ops that read one while writing the other).
void check_disjoint(const Tensor& in, const Tensor& out, const char* op, const char* in_name, const char* out_name) {
  if (overlaps(in, out)) fail("internal: {}: {} {} and {} {} overlap", op, in_name, shape_of(in), out_name, shape_of(out));
}

// Error when `out` overlaps `in` other than as the very same view (element-wise ops that may run
// in place).
void check_alias_or_disjoint(const Tensor& in, const Tensor& out, const char* op, const char* in_name,
                             const char* out_name) {
  const bool same = in.data() == out.data() && in.dtype == out.dtype && in.rows == out.rows && in.cols == out.cols;
  if (!same && overlaps(in, out))
    fail("internal: {}: {} {} and {} {} overlap without being the same tensor", op, in_name, shape_of(in), out_name,
         shape_of(out));
}

// A weight used as a vector of n values (norm weight, bias).
void check_vector(const Weight& w, int64_t n, const char* op, const char* what) {
  if (w.in_features * w.out_features != n)
    fail("internal: {} {} {} [{}][{}] has {} values for rows of {}", op, what, w.name, w.out_features,
         w.in_features, w.in_features * w.out_features, n);
}

void check_rows_inside(std::span<const int32_t> rows, int64_t limit, const char* op) {
  for (const int32_t r : rows)
    if (r < 0 || r >= limit) fail("internal: {} row {} outside [0, {})", op, r, limit);
}

}  // namespace

const char* backend_op_name(BackendOp op) { return kOpNames.name(op); }

bool backend_op_defined(BackendOp op, DType dtype) {
  switch (op) {
    case BackendOp::rope:
    case BackendOp::scatter_rows:
    case BackendOp::row_sq_dist:
    case BackendOp::attention: return dtype == DType::f32 || dtype == DType::f16;
    default: return dtype == DType::f32;
  }
}

void Backend::check_tensor(const Tensor& t, const char* op, const char* what) const {
  if (!t.storage) fail("internal: {}: {} {} has no storage", op, what, shape_of(t));
  if (t.storage->owner() != this)
    fail("internal: {}: {} {} lives on another backend, not {}", op, what, shape_of(t), name());
  if (t.rows < 0 || t.cols < 0 || t.byte_offset + t.bytes() > t.storage->bytes())
    fail("internal: {}: {} {} at byte {} lies outside its storage of {} bytes", op, what, shape_of(t), t.byte_offset,
         t.storage->bytes());
}

void Backend::check_f32_pair(const Tensor& in, const Tensor& out, const char* op, const char* in_name,
                             const char* out_name) const {
  check_tensor(in, op, in_name);
  check_tensor(out, op, out_name);
  check_dtype(in, DType::f32, op, in_name);
  check_dtype(out, DType::f32, op, out_name);
  check_same_shape(in, out, op);
  check_alias_or_disjoint(in, out, op, in_name, out_name);
}

void Backend::check_weight(const Weight& w, const char* op) const {
  if (w.owner() != this)
    fail("internal: {}: weight '{}' was not loaded by this backend ({})", op, w.name, name());
}

void Backend::check_next_product(NextProduct next, const Tensor& x, const char* op) const {
  if (!next.weight) return;
  check_weight(*next.weight, op);
  if (next.weight->in_features != x.cols)
    fail("internal: {}: the next product's weight '{}' takes {} values per row, the output has {}", op,
         next.weight->name, next.weight->in_features, x.cols);
}

void Backend::check_supported(BackendOp op, DType dtype) const {
  if (!supports(op, dtype))
    fail("internal: the {} backend does not support {} on {}", name(), backend_op_name(op), dtype_name(dtype));
}

// ---- memory and weights

void Backend::copy(const Tensor& src, const Tensor& dst) {
  check_tensor(src, "copy", "src");
  check_tensor(dst, "copy", "dst");
  check_copy(src, dst);
  copy_impl(src, dst);
}

namespace {

// Error unless t is a tensor a weight can be made of: a supported type, values, data for them.
void check_weight_tensor(const GgufTensor& t) {
  if (!ggml_type_supported(t.type))
    fail("tensor '{}' has type {}, which ragkv does not support", t.name, ggml_type_name(t.type));
  int64_t n = t.ne.empty() ? 0 : 1;
  for (const int64_t d : t.ne) n *= std::max<int64_t>(d, 0);
  if (n == 0) fail("tensor '{}' of shape {} has no values", t.name, t.shape_str());
  const int64_t cols = t.ne[0], rows = n / cols;
  const size_t data_bytes = ggml_row_bytes(t.type, cols) * static_cast<size_t>(rows);  // throws when cols splits a block
  if (t.data == nullptr || (t.nbytes != 0 && t.nbytes < data_bytes))
    fail("tensor '{}' ({} {}) holds {} bytes of data, expected {}", t.name, ggml_type_name(t.type), t.shape_str(),
         t.data ? t.nbytes : 0, data_bytes);
}

}  // namespace

std::unique_ptr<Weight> Backend::load_weight(const GgufTensor& t, WeightMemory mem) {
  check_weight_tensor(t);
  const GgufTensor* parts[1] = {&t};
  std::unique_ptr<Weight> w = load_weight_impl(parts, mem);
  w->owner_ = this;
  w->name = t.name;
  w->in_features = t.ne[0];
  w->out_features = t.rows();
  w->part_rows = {w->out_features};
  return w;
}

std::unique_ptr<Weight> Backend::load_weight_stack(std::span<const GgufTensor* const> parts, const std::string& name,
                                                   WeightMemory mem) {
  if (parts.empty()) fail("internal: weight stack {} of no tensors", name);
  std::vector<int64_t> rows;
  for (const GgufTensor* t : parts) {
    check_weight_tensor(*t);
    if (t->ne[0] != parts[0]->ne[0])
      fail("cannot stack '{}' {} with '{}' {}: rows of {} and {} values", parts[0]->name, parts[0]->shape_str(),
           t->name, t->shape_str(), parts[0]->ne[0], t->ne[0]);
    rows.push_back(t->rows());
  }
  std::unique_ptr<Weight> w = load_weight_impl(parts, mem);
  w->owner_ = this;
  w->name = name;
  w->in_features = parts[0]->ne[0];
  w->out_features = 0;
  for (const int64_t r : rows) w->out_features += r;
  w->part_rows = std::move(rows);
  return w;
}

// ---- ops

void Backend::embed(const Weight& table, std::span<const int32_t> ids, const Tensor& out, float scale) {
  check_weight(table, "embed");
  check_tensor(out, "embed", "out");
  check_dtype(out, DType::f32, "embed", "out");
  const int64_t n = static_cast<int64_t>(ids.size());
  if (out.rows != n || out.cols != table.in_features)
    fail("internal: embed of {} ids from {} [{}][{}] into [{}][{}]", n, table.name, table.out_features,
         table.in_features, out.rows, out.cols);
  for (const int32_t id : ids)
    if (id < 0 || id >= table.out_features)
      fail("token id {} is outside the vocabulary of {} tokens", id, table.out_features);
  check_supported(BackendOp::embed, out.dtype);
  embed_impl(table, ids, out, scale);
}

void Backend::matmul(const Tensor& x, const Weight& w, const Tensor& y, const Weight* bias, Activations act) {
  const Weight* biases[1] = {bias};
  check_matmul(x, w, std::span(&y, 1), bias ? std::span<const Weight* const>(biases) : std::span<const Weight* const>());
  matmul_impl(x, w, std::span(&y, 1), biases, act);
}

void Backend::matmul_parts(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                           std::span<const Weight* const> biases, Activations act) {
  if (outs.size() != w.part_rows.size())
    fail("internal: matmul_parts of {} ({} parts) into {} outputs", w.name, w.part_rows.size(), outs.size());
  check_matmul(x, w, outs, biases);
  std::vector<const Weight*> b(outs.size(), nullptr);
  std::copy(biases.begin(), biases.end(), b.begin());
  matmul_impl(x, w, outs, b, act);
}

void Backend::check_matmul(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                           std::span<const Weight* const> biases) const {
  check_weight(w, "matmul");
  check_tensor(x, "matmul", "x");
  check_dtype(x, DType::f32, "matmul", "x");
  if (x.cols != w.in_features)
    fail("internal: matmul [{}][{}] x {}ᵀ [{}][{}]", x.rows, x.cols, w.name, w.out_features, w.in_features);
  if (!biases.empty() && biases.size() != outs.size())
    fail("internal: matmul of {} with {} biases for {} outputs", w.name, biases.size(), outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const Tensor& y = outs[i];
    const int64_t cols = outs.size() == 1 ? w.out_features : w.part_rows[i];
    check_tensor(y, "matmul", "y");
    check_dtype(y, DType::f32, "matmul", "y");
    if (y.cols != cols || x.rows != y.rows)
      fail("internal: matmul [{}][{}] x {}ᵀ [{}][{}] -> [{}][{}]", x.rows, x.cols, w.name, cols, w.in_features,
           y.rows, y.cols);
    check_disjoint(x, y, "matmul", "x", "y");
    for (size_t j = 0; j < i; ++j) check_disjoint(outs[j], y, "matmul", "y", "y");
    if (!biases.empty() && biases[i]) {
      check_weight(*biases[i], "matmul");
      check_vector(*biases[i], cols, "matmul", "bias");
    }
  }
  check_supported(BackendOp::matmul, x.dtype);
}

void Backend::rms_norm(const Tensor& x, const Weight& w, float eps, const Tensor& y) {
  check_weight(w, "rms_norm");
  check_f32_pair(x, y, "rms_norm", "x", "y");
  check_vector(w, x.cols, "rms_norm", "weight");
  check_supported(BackendOp::rms_norm, x.dtype);
  rms_norm_impl(x, w, eps, y);
}

void Backend::check_rope(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
                         const RopeParams& p, const char* op) const {
  check_tensor(x, op, "x");
  if (n_heads <= 0 || head_dim <= 0 || x.cols != int64_t(n_heads) * head_dim ||
      int64_t(positions.size()) != x.rows)
    fail("internal: {} on [{}][{}] with {} heads of {} and {} positions", op, x.rows, x.cols, n_heads, head_dim,
         positions.size());
  if (p.n_rot < 0 || p.n_rot % 2 != 0 || p.n_rot > head_dim)
    fail("internal: {} rotates {} dimensions of heads of {} (expected an even count ≤ head_dim)", op, p.n_rot,
         head_dim);
  if (!p.freq_factors.empty() && int64_t(p.freq_factors.size()) < p.n_rot / 2)
    fail("internal: {} has {} frequency factors for {} rotated pairs", op, p.freq_factors.size(), p.n_rot / 2);
  check_supported(BackendOp::rope, x.dtype);
}

void Backend::rope(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
                   const RopeParams& p, bool inverse) {
  check_rope(x, positions, n_heads, head_dim, p, "rope");
  rope_impl(x, positions, n_heads, head_dim, p, inverse);
}

void Backend::check_rope_qk(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head,
                            int n_head_kv, int head_dim, const RopeParams& p, const char* op) const {
  check_rope(q, positions, n_head, head_dim, p, op);
  check_rope(k, positions, n_head_kv, head_dim, p, op);
  if (q.dtype != k.dtype) fail("internal: {} of {} q and {} k", op, dtype_name(q.dtype), dtype_name(k.dtype));
  check_disjoint(q, k, op, "q", "k");
}

void Backend::rope_qk(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head, int n_head_kv,
                      int head_dim, const RopeParams& p) {
  check_rope_qk(q, k, positions, n_head, n_head_kv, head_dim, p, "rope_qk");
  rope_qk_impl(q, k, positions, n_head, n_head_kv, head_dim, p);
}

void Backend::layer_norm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& y) {
  check_weight(w, "layer_norm");
  check_weight(b, "layer_norm");
  check_f32_pair(x, y, "layer_norm", "x", "y");
  check_vector(w, x.cols, "layer_norm", "weight");
  check_vector(b, x.cols, "layer_norm", "bias");
  check_supported(BackendOp::layer_norm, x.dtype);
  layer_norm_impl(x, w, b, eps, y);
}

void Backend::gelu_erf(const Tensor& x, const Tensor& y) {
  check_f32_pair(x, y, "gelu_erf", "x", "y");
  check_supported(BackendOp::gelu_erf, x.dtype);
  gelu_erf_impl(x, y);
}

void Backend::swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  check_f32_pair(gate, out, "swiglu", "gate", "out");
  check_f32_pair(up, out, "swiglu", "up", "out");
  check_supported(BackendOp::swiglu, gate.dtype);
  swiglu_impl(gate, up, out);
}

void Backend::geglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  check_f32_pair(gate, out, "geglu", "gate", "out");
  check_f32_pair(up, out, "geglu", "up", "out");
  check_supported(BackendOp::geglu, gate.dtype);
  geglu_impl(gate, up, out);
}

void Backend::glu_ffn(const Tensor& xn, const Weight& w_gate_up, const Weight& w_down, const Tensor& gate,
                      const Tensor& up, const Tensor& proj, bool gelu, Activations act) {
  if (w_gate_up.part_rows.size() != 2)
    fail("internal: glu_ffn of {} ({} parts, expected gate and up)", w_gate_up.name, w_gate_up.part_rows.size());
  const Tensor gate_up[2] = {gate, up};
  check_matmul(xn, w_gate_up, gate_up, {});
  check_matmul(gate, w_down, std::span(&proj, 1), {});
  check_disjoint(xn, proj, "glu_ffn", "xn", "proj");
  check_disjoint(up, proj, "glu_ffn", "up", "proj");
  check_supported(gelu ? BackendOp::geglu : BackendOp::swiglu, gate.dtype);
  glu_ffn_impl(xn, w_gate_up, w_down, gate, up, proj, gelu, act);
}

void Backend::glu_ffn_impl(const Tensor& xn, const Weight& w_gate_up, const Weight& w_down, const Tensor& gate,
                           const Tensor& up, const Tensor& proj, bool gelu, Activations act) {
  const Tensor gate_up[2] = {gate, up};
  const Weight* no_bias[2] = {nullptr, nullptr};
  matmul_impl(xn, w_gate_up, gate_up, no_bias, act);
  if (gelu) geglu_impl(gate, up, gate);
  else swiglu_impl(gate, up, gate);
  matmul_impl(gate, w_down, std::span(&proj, 1), std::span(no_bias).first(1), act);
}

void Backend::add(const Tensor& a, const Tensor& b) {
  check_f32_pair(b, a, "add", "b", "a");
  check_supported(BackendOp::add, a.dtype);
  add_impl(a, b);
}

void Backend::add_rms_norm(const Tensor& x, const Tensor& y, const Weight& w, float eps, const Tensor& xn,
                           NextProduct next) {
  check_f32_pair(y, x, "add_rms_norm", "y", "x");
  check_f32_pair(x, xn, "add_rms_norm", "x", "xn");
  check_weight(w, "add_rms_norm");
  check_vector(w, x.cols, "add_rms_norm", "weight");
  check_disjoint(y, x, "add_rms_norm", "y", "x");
  check_disjoint(y, xn, "add_rms_norm", "y", "xn");
  check_supported(BackendOp::add, x.dtype);
  check_supported(BackendOp::rms_norm, x.dtype);
  check_next_product(next, xn, "add_rms_norm");
  add_rms_norm_impl(x, y, w, eps, xn, next);
}

void Backend::check_scatter(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows, const char* op) const {
  check_tensor(src, op, "src");
  check_tensor(dst, op, "dst");
  check_dtype(src, DType::f32, op, "src");
  if (src.cols != dst.cols || int64_t(rows.size()) != src.rows)
    fail("internal: {} [{}][{}] into [{}][{}] with {} rows", op, src.rows, src.cols, dst.rows, dst.cols, rows.size());
  check_rows_inside(rows, dst.rows, op);
  check_disjoint(src, dst, op, "src", "dst");
  check_supported(BackendOp::scatter_rows, dst.dtype);
}

void Backend::scatter_rows(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows) {
  check_scatter(src, dst, rows, "scatter_rows");
  scatter_rows_impl(src, dst, rows);
}

void Backend::check_scatter_kv(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                               std::span<const int32_t> rows, const char* op) const {
  check_scatter(k, k_dst, rows, op);
  check_scatter(v, v_dst, rows, op);
  check_same_shape(k, v, op);
  check_same_shape(k_dst, v_dst, op);
  if (k_dst.dtype != v_dst.dtype) fail("internal: {} into {} K and {} V", op, dtype_name(k_dst.dtype), dtype_name(v_dst.dtype));
  check_disjoint(k, v_dst, op, "k", "v_dst");
  check_disjoint(v, k_dst, op, "v", "k_dst");
  check_disjoint(k_dst, v_dst, op, "k_dst", "v_dst");
}

void Backend::scatter_kv_rows(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                              std::span<const int32_t> rows) {
  check_scatter_kv(k, v, k_dst, v_dst, rows, "scatter_kv_rows");
  scatter_kv_rows_impl(k, v, k_dst, v_dst, rows);
}

void Backend::rope_qk_scatter_kv(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                                 int n_head, int n_head_kv, int head_dim, const RopeParams& p, const Tensor& k_dst,
                                 const Tensor& v_dst, std::span<const int32_t> rows) {
  check_rope_qk(q, k, positions, n_head, n_head_kv, head_dim, p, "rope_qk_scatter_kv");
  check_scatter_kv(k, v, k_dst, v_dst, rows, "rope_qk_scatter_kv");
  check_disjoint(q, k_dst, "rope_qk_scatter_kv", "q", "k_dst");
  check_disjoint(q, v_dst, "rope_qk_scatter_kv", "q", "v_dst");
  check_disjoint(q, v, "rope_qk_scatter_kv", "q", "v");
  check_disjoint(k, v, "rope_qk_scatter_kv", "k", "v");  // k is rotated while v is read
  rope_qk_scatter_kv_impl(q, k, v, positions, n_head, n_head_kv, head_dim, p, k_dst, v_dst, rows);
}

void Backend::qkv_rope_scatter_kv(const Tensor& x, const Weight& w, std::span<const Tensor> qkv,
                                  std::span<const Weight* const> biases, Activations act,
                                  std::span<const int32_t> positions, int n_head, int n_head_kv, int head_dim,
                                  const RopeParams& p, const Tensor& k_dst, const Tensor& v_dst,
                                  std::span<const int32_t> rows) {
  if (qkv.size() != 3 || w.part_rows.size() != 3)
    fail("internal: qkv_rope_scatter_kv of {} ({} parts) into {} outputs", w.name, w.part_rows.size(), qkv.size());
  check_matmul(x, w, qkv, biases);
  check_rope_qk(qkv[0], qkv[1], positions, n_head, n_head_kv, head_dim, p, "qkv_rope_scatter_kv");
  check_scatter_kv(qkv[1], qkv[2], k_dst, v_dst, rows, "qkv_rope_scatter_kv");
  for (const Tensor& out : qkv) {
    check_disjoint(x, out, "qkv_rope_scatter_kv", "x", "an output");
    check_disjoint(out, k_dst, "qkv_rope_scatter_kv", "an output", "k_dst");
    check_disjoint(out, v_dst, "qkv_rope_scatter_kv", "an output", "v_dst");
  }
  check_disjoint(x, k_dst, "qkv_rope_scatter_kv", "x", "k_dst");  // read while the cache is written
  check_disjoint(x, v_dst, "qkv_rope_scatter_kv", "x", "v_dst");
  check_disjoint(qkv[0], qkv[1], "qkv_rope_scatter_kv", "q", "k");
  check_disjoint(qkv[0], qkv[2], "qkv_rope_scatter_kv", "q", "v");
  check_disjoint(qkv[1], qkv[2], "qkv_rope_scatter_kv", "k", "v");
  std::vector<const Weight*> b(3, nullptr);
  std::copy(biases.begin(), biases.end(), b.begin());
  qkv_rope_scatter_kv_impl(x, w, qkv, b, act, positions, n_head, n_head_kv, head_dim, p, k_dst, v_dst, rows);
}

void Backend::gather_rows(const Tensor& src, const Tensor& out, std::span<const int32_t> rows) {
  check_tensor(src, "gather_rows", "src");
  check_tensor(out, "gather_rows", "out");
  check_dtype(src, DType::f32, "gather_rows", "src");
  check_dtype(out, DType::f32, "gather_rows", "out");
  if (out.cols != src.cols || int64_t(rows.size()) != out.rows)
    fail("internal: gather_rows of {} rows from [{}][{}] into [{}][{}]", rows.size(), src.rows, src.cols, out.rows,
         out.cols);
  check_rows_inside(rows, src.rows, "gather_rows");
  check_disjoint(src, out, "gather_rows", "src", "out");
  check_supported(BackendOp::gather_rows, out.dtype);
  gather_rows_impl(src, out, rows);
}

void Backend::row_sq_dist(const Tensor& a, const Tensor& b, std::span<const int32_t> rows, const Tensor& out) {
  check_tensor(a, "row_sq_dist", "a");
  check_tensor(b, "row_sq_dist", "b");
  check_tensor(out, "row_sq_dist", "out");
  check_dtype(a, DType::f32, "row_sq_dist", "a");
  check_dtype(out, DType::f32, "row_sq_dist", "out");
  if (a.cols != b.cols || int64_t(rows.size()) != a.rows || out.rows != a.rows || out.cols != 1)
    fail("internal: row_sq_dist [{}][{}] against [{}][{}] with {} rows into [{}][{}]", a.rows, a.cols, b.rows,
         b.cols, rows.size(), out.rows, out.cols);
  check_rows_inside(rows, b.rows, "row_sq_dist");
  check_disjoint(a, out, "row_sq_dist", "a", "out");
  check_disjoint(b, out, "row_sq_dist", "b", "out");
  check_supported(BackendOp::row_sq_dist, b.dtype);
  row_sq_dist_impl(a, b, rows, out);
}

void Backend::attention(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k, const Tensor& v,
                        std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p, const Tensor& out,
                        SegmentMass* seg_mass, NextProduct next) {
  check_tensor(q, "attention", "q");
  check_tensor(k, "attention", "k");
  check_tensor(v, "attention", "v");
  check_tensor(out, "attention", "out");
  check_dtype(q, DType::f32, "attention", "q");
  check_dtype(out, DType::f32, "attention", "out");
  if (k.dtype != v.dtype) fail("internal: attention with k {} and v {} of different dtypes", shape_of(k), shape_of(v));
  const int64_t n_q = q.rows;
  const int64_t q_cols = int64_t(p.n_head) * p.head_dim, kv_cols = int64_t(p.n_kv_head) * p.head_dim;
  if (p.n_head <= 0 || p.n_kv_head <= 0 || p.head_dim <= 0 || p.n_head % p.n_kv_head != 0 || q.cols != q_cols ||
      out.cols != q_cols || out.rows != n_q || k.cols != kv_cols || v.cols != kv_cols || n_kv < 0 || n_kv > k.rows ||
      n_kv > v.rows || (p.causal && (int64_t(k_pos.size()) < n_kv || int64_t(q_pos.size()) != n_q)))
    fail("internal: attention shapes q [{}][{}] ({} positions), k [{}][{}], v [{}][{}] ({} positions), n_kv {}, "
         "out [{}][{}], {} heads / {} kv heads of {}",
         q.rows, q.cols, q_pos.size(), k.rows, k.cols, v.rows, v.cols, k_pos.size(), n_kv, out.rows, out.cols,
         p.n_head, p.n_kv_head, p.head_dim);
  if (!p.causal && p.sliding_window > 0)
    fail("internal: attention: a sliding window ({}) needs causal attention", p.sliding_window);
  if (seg_mass) {
    const auto& b = seg_mass->seg_begin;
    if (seg_mass->out == nullptr || (!seg_mass->key_totals && (b.empty() || !std::is_sorted(b.begin(), b.end()))))
      fail("internal: attention: segment mass needs ascending boundaries ({} given) and an output", b.size());
    if (seg_mass->first_query != 0 && (!seg_mass->key_totals || seg_mass->first_query < 0 || seg_mass->first_query > n_q))
      fail("internal: attention: key totals from query row {} of {} ({})", seg_mass->first_query, n_q,
           seg_mass->key_totals ? "out of range" : "without key_totals");
  }
  check_disjoint(q, out, "attention", "q", "out");
  check_disjoint(k, out, "attention", "k", "out");
  check_disjoint(v, out, "attention", "v", "out");
  check_supported(BackendOp::attention, k.dtype);
  check_next_product(next, out, "attention");
  attention_impl(q, q_pos, k, v, k_pos, n_kv, p, out, seg_mass, next);
}

}  // namespace ragkv
