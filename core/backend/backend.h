// The backend interface (DESIGN.md §3): memory and the named ops the transformer layer loop
// calls. The CPU backend (cpu-backend.cpp) implements everything and is the numerical
// reference; the CUDA backend (cuda/) implements the same ops on device memory.
//
// Tensors are row-major 2-D views [rows][cols] on one backend's memory. Multi-head data is a
// 2-D view with the heads side by side in a row: [n_tok][n_head * head_dim]. KV buffers are f16
// [n_ctx][n_kv_head * head_dim] per layer, in every mode (DESIGN.md §4), and rows of the buffer
// carry explicit absolute positions, so attention can run for an arbitrary set of query rows
// against an arbitrary set of cached key rows (the selective-recompute fusor).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/format/quant.h"

namespace ragkv {

struct GgufTensor;

enum class DType : uint8_t { f32, f16 };
size_t dtype_size(DType t);
const char* dtype_name(DType t);

enum class DeviceKind : uint8_t { cpu, cuda };

// Whether a backend may compute on a weight tensor's bytes where they lie (load_weight): in_place
// when the caller keeps the mapped file open for the weight's lifetime (Model keeps its GGUF), so
// the CPU backend neither copies nor dequantises it; copy otherwise. kernel_layout: as in_place,
// for a weight used only in products (never embed's rows), which a backend may then keep in its
// kernels' own layout instead, releasing the file's pages where the tensor is file_mapped (the
// CPU backend's Q4_K rows on AVX-512 VNNI, cpu-weight.h).
enum class WeightMemory : uint8_t { copy, in_place, kernel_layout };

// What a product may do to its activations. f32: use them as they are, so a row's result does not
// depend on how rows are grouped into calls (prompts: full, prefix and blend agree on the rows
// they share). block8: a backend may round them per block to 8 bits for integer dot products on
// quantised weights, as llama.cpp does — decode steps, where reading the weights dominates (the
// CPU backend does; weights marked Weight::wide_activations never are).
enum class Activations : uint8_t { f32, block8 };

class Weight;

// The product that will read an op's output next, named to the op as a hint: a backend may prepare
// that product's operand in the same pass (the CUDA backend quantises a decode step's xn into the
// 8-bit blocks of a quantised weight as it writes it, and writes a prefill GEMM's row-scaled f16
// operand). The results are the same with or without.
struct NextProduct {
  const Weight* weight = nullptr;  // none: no hint
  Activations act = Activations::f32;
  bool gated = false;  // the product is glu_ffn's gate/up (the CUDA prefill scales its operand for f16 products)
};

class Backend;

// Owned memory of one backend; freed through the backend that allocated it.
class Storage {
 public:
  Storage(Backend* owner, void* data, size_t bytes) : owner_(owner), data_(data), bytes_(bytes) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Backend* owner() const { return owner_; }

 private:
  Backend* owner_;
  void* data_;
  size_t bytes_;
};

// A row-major [rows][cols] view, contiguous rows (row stride == cols). Cheap to copy; keeps its
// storage alive.
struct Tensor {
  std::shared_ptr<Storage> storage;
  size_t byte_offset = 0;
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;

  void* data() const { return static_cast<char*>(storage->data()) + byte_offset; }
  template <typename T>
  T* as() const { return static_cast<T*>(data()); }
  int64_t numel() const { return rows * cols; }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  // Rows [first, first + n) of this tensor.
  Tensor slice_rows(int64_t first, int64_t n) const;
  // Same memory seen as [rows'][cols'] (numel must match).
  Tensor reshape(int64_t new_rows, int64_t new_cols) const;
  bool empty() const { return numel() == 0; }
};

// A weight matrix W [out][in] (y = x · Wᵀ), prepared once for the backend (kept in its GGUF type
// by the CPU backend, f16 on CUDA). Vectors (norm weights, biases) are Weights with out == 1.
// A stack (Backend::load_weight_stack) is several matrices sharing their input — Q, K and V, or
// gate and up — as one [Σ out][in] weight, so one product computes them all.
class Weight {
 public:
  virtual ~Weight() = default;
  int64_t out_features = 0, in_features = 0;
  std::string name;
  std::vector<int64_t> part_rows;  // out_features of each stacked part, in order (one for a plain weight)
  // Products with this weight never round its activations to 8 bits (the CPU backend's decode
  // blocks): they stay f32, or meet Q8_0 weights as 16-bit blocks (rounding 256 times finer, at
  // integer-product speed). Set on the output head: the logits' argmax and the first-token
  // distributions eval compares are where 8-bit rounding shows (a greedy answer that flips on
  // SmolLM2), and the head is the largest single product of a decode step.
  bool wide_activations = false;
  const Backend* owner() const { return owner_; }  // the backend whose load_weight made it

 private:
  friend class Backend;
  const Backend* owner_ = nullptr;
};

// Rotary position embedding of one layer (RoFormer; Llama-3 scaling via per-pair freq factors).
struct RopeParams {
  int n_rot = 0;              // dimensions rotated per head (== head_dim for all models here)
  float freq_base = 10000.f;  // θ base
  float freq_scale = 1.f;     // linear position scaling (positions multiplied by this)
  bool neox = false;          // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
  std::vector<float> freq_factors;  // Llama-3 style: θ_i divided by factor_i (empty: none)
};

// Per-pair inverse frequencies θ_i = base^(−2i/n_rot) / factor_i (RoFormer Eq. 15; Llama-3
// factors), computed in double and rounded to f32 so every backend rotates by the same angles.
std::vector<float> rope_inv_freq(const RopeParams& p);

struct AttentionParams {
  int n_head = 0, n_kv_head = 0, head_dim = 0;
  float scale = 0.f;          // applied to q·k
  int sliding_window = 0;     // > 0: a query at p sees keys at positions in (p - window, p]
  float softcap = 0.f;        // > 0: logits = softcap · tanh(logits / softcap)
  bool causal = true;         // false: every query sees every key in [0, n_kv), positions unused
                              // (bidirectional encoders such as BERT; sliding_window must be 0)
};

// Optional per-query attention mass per key segment (Cache-Craft inter/intra attention).
// Segments are contiguous ranges of KV rows: segment s covers rows [seg_begin[s], seg_begin[s+1]).
// With key_totals, instead: out resized to [n_kv], each key row's probability summed over every
// query row and head (seg_begin unused) — what selection by the question's attention needs
// (ProphetKV), without a [n_q][n_head][n_kv] array crossing from the device per layer.
// With key_totals and deferred: out is resized at once but may be filled only by the backend's next
// synchronize() — the CUDA backend then copies every pending total back together instead of
// waiting for each call (prophet's question pass reads one per layer); out must stay alive and
// untouched until then. The CPU backend fills it at once.
// With key_totals, out is every row's attention as a call without mass gives it (the CPU backend:
// the same bits; the CUDA backend: within its kernels' tolerance — a call with totals may take
// another kernel than the same call without), and the totals sum
// the probabilities of query rows [first_query, n_q) only — so one call gives a layer's attention
// and its question's totals (prophet's first pass: the question's rows are the layer's last),
// where two calls computed the question rows' attention twice.
struct SegmentMass {
  std::vector<int64_t> seg_begin;  // n_seg + 1 boundaries over the KV rows, ascending
  std::vector<float>* out = nullptr;  // resized to [n_q][n_head][n_seg], summed probabilities
  bool key_totals = false;
  bool deferred = false;
  int64_t first_query = 0;  // key_totals only: in [0, n_q]
};

// The ops of Backend, for Backend::supports().
enum class BackendOp : uint8_t {
  embed,
  matmul,
  rms_norm,
  rope,
  layer_norm,
  gelu_erf,
  swiglu,
  geglu,
  add,
  scatter_rows,
  gather_rows,
  row_sq_dist,
  attention,
};
const char* backend_op_name(BackendOp op);  // "rope"
// The storage dtypes the interface defines for an op (the dtype supports() is asked about, see
// Backend::supports): f32 and f16 for rope, scatter_rows, row_sq_dist and attention; f32 only
// for the others.
bool backend_op_defined(BackendOp op, DType dtype);

// The interface. The ops are non-virtual: each checks its arguments against the contract written
// beside it (dtypes, shapes, row indices inside the tensors, positions and ids counts, outputs
// that must not overlap their inputs, tensors and weights of this backend), asks supports(), and
// only then calls the backend's protected *_impl (backend-ops.cpp), so a bad call fails with the
// same ragkv::Error, naming the op and the shapes, on every backend.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  // The kernels whose rounding the outputs carry ("avx2+avx512-vnni-16" on this CPU): two runs
  // with different kernels give different bits, so eval's records and baseline cache name them.
  virtual std::string kernels() const { return name(); }
  virtual void set_threads(int n) = 0;
  virtual int threads() const { return 0; }  // host threads computing (0: not a CPU backend's setting)
  // How many prompt rows Model::forward passes through the layers at once: on the CPU a micro-batch
  // that keeps a layer's activations in cache; on a GPU a whole long prompt, so each weight is
  // read (and a quantised one dequantised) once per prompt and the GEMMs get rows to fill the chip.
  virtual int64_t prefill_rows() const { return 512; }

  // Whether this backend runs `op` with `dtype` as its storage dtype: the tensor's dtype for
  // rope, the destination's for scatter_rows, b's for row_sq_dist, the K/V dtype for attention,
  // f32 for the f32-only ops. Only dtypes the interface defines for the op (backend_op_defined)
  // can be supported; an op called with an unsupported one fails loudly, naming the backend.
  virtual bool supports(BackendOp op, DType dtype) const = 0;

  // ---- memory
  virtual void* raw_alloc(size_t bytes) = 0;
  virtual void raw_free(void* p) = 0;
  Tensor alloc(DType dtype, int64_t rows, int64_t cols);
  // Error unless src and dst have one dtype and shape and do not overlap (for copy()).
  static void check_copy(const Tensor& src, const Tensor& dst);
  virtual void upload(const Tensor& dst, const void* host_src) = 0;  // all of dst
  virtual void download(const Tensor& src, void* host_dst) = 0;      // all of src
  virtual void fill_zero(const Tensor& t) = 0;
  // dst = src, both on this backend, same dtype and shape, not overlapping (queued in order with
  // the ops: a device-resident chunk KV copied into a prompt's rows).
  void copy(const Tensor& src, const Tensor& dst);
  // Layer-wise KV loading (CacheBlend §5): upload_async starts copying host_src into dst on a
  // copy queue that runs beside compute and returns once host_src may be reused (from memory
  // given to pin_host_memory: read until the copy completes, which unpin_host_memory waits for);
  // the ops queued after the next wait_uploads() see the data. Synchronous on backends without
  // such a queue.
  virtual void upload_async(const Tensor& dst, const void* host_src) { upload(dst, host_src); }
  virtual void wait_uploads() {}
  // Host memory that upload_async will read again and again (the host tier's chunk KV): a backend
  // that copies by DMA may pin it (CUDA: cudaHostRegister) and copy straight from it, without
  // staging it through a buffer of its own first (a CPU memcpy per upload). While pinned, the
  // caller keeps [p, p + bytes) allocated and unchanged; unpin_host_memory(p) (before freeing it,
  // and before the backend goes) waits for the copies that read it. A hint: a backend may ignore
  // it (the CPU backend does), and a failed pin leaves uploads staged as before.
  virtual void pin_host_memory(const void* p, size_t bytes) {
    (void)p;
    (void)bytes;
  }
  virtual void unpin_host_memory(const void* p) { (void)p; }
  // Steps recorded and launched as one unit (issue 40 item 4: decode without launch overhead): a
  // backend may record the ops queued between begin_step() and end_step() and launch them
  // together (the CUDA backend, unless RAGKV_CUDA_GRAPHS=0: a CUDA graph per decode step). Between
  // the two, ops must not read results back to the host. begin_step() says whether it records.
  // end_step() returns false when the recording could not be launched — then none of its ops ran,
  // and the caller runs the same ops again unrecorded (they must be repeatable); abort_step()
  // drops a recording an op threw out of (the caller then runs the ops unrecorded too). A backend
  // may also replay an earlier recording instead (the CUDA backend, once steps repeat): the ops
  // then only hand over their per-step data; where the step departs from the recording an op may
  // throw (handled as any throw) or end_step() returns false (none of its ops ran).
  virtual bool begin_step() { return false; }
  virtual bool end_step() { return true; }
  virtual void abort_step() {}
  // How the recorded steps ran so far, for a bench's report (the CUDA backend: "C captured, R
  // replayed, M missed"); empty where none was recorded.
  virtual std::string step_summary() const { return {}; }
  // Names the work that follows in a per-op profile (the CUDA backend's RAGKV_CUDA_PROFILE,
  // cuda/op-profile.h): the benches name their prefill and decode runs, modes and tiers. No effect
  // where nothing is profiled.
  virtual void set_profile_section(std::string_view name) { (void)name; }
  virtual void synchronize() {}

  // ---- weights
  // Error naming the tensor for a type ragkv does not dequantise, no values, or data shorter
  // than the shape; the backend may refuse more (the CUDA backend: values f16 cannot hold).
  std::unique_ptr<Weight> load_weight(const GgufTensor& t, WeightMemory mem = WeightMemory::copy);
  // Matrices with one in_features stacked in order into one weight named `name` (each part keeps
  // its own type on the CPU). Error as load_weight, or naming the part whose in_features differs.
  std::unique_ptr<Weight> load_weight_stack(std::span<const GgufTensor* const> parts, const std::string& name,
                                            WeightMemory mem = WeightMemory::copy);

  // ---- ops (all write their output; inputs and outputs are f32 unless stated)
  // out[i] = table row ids[i] (token embedding lookup), times scale. out [ids.size()][table.in];
  // every id in [0, table.out).
  void embed(const Weight& table, std::span<const int32_t> ids, const Tensor& out, float scale);
  // y[n][out] = x[n][in] · Wᵀ (+ bias[out] if given). y must not overlap x.
  // act (Activations): on the CPU, block8 lets quantised weights meet activations quantised per
  // block to 8 bits (integer dot products, core/backend/quant-kernels.h); f32, and any weight marked
  // wide_activations, keeps them wide: SGEMM on weights dequantised tile by tile, or for calls of
  // fewer than 32 rows on Q8_0/F16/BF16/F32 weights, kernels on 16-bit activation blocks (Q8_0)
  // or f32 activations.
  // Either way each output row depends on its input row alone, whatever the other rows of the call.
  void matmul(const Tensor& x, const Weight& w, const Tensor& y, const Weight* bias = nullptr,
              Activations act = Activations::f32);
  // The parts of a stacked weight into their own outputs: outs[p] [n][part_rows[p]] = x · W_pᵀ
  // (+ biases[p] when given and not null). biases empty or one per part; outputs disjoint from x
  // and from each other.
  void matmul_parts(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                    std::span<const Weight* const> biases = {}, Activations act = Activations::f32);
  // Row-wise RMSNorm over the last dimension: y = x / rms(x) · w. x and y may alias.
  // With x as [n·heads][head_dim] this is per-head QK-norm.
  void rms_norm(const Tensor& x, const Weight& w, float eps, const Tensor& y);
  // Rotary embedding in place on x [n][n_heads·head_dim] (f32 or f16), row i at positions[i].
  // inverse = true removes it (rotation by −θ·p). Reused chunk K is rotated by the position
  // difference (forward, positions = Δ), never removed and re-applied (core/rag/precompute.h says why).
  // p.n_rot even and ≤ head_dim; p.freq_factors empty or at least n_rot / 2 of them.
  void rope(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
            const RopeParams& p, bool inverse);
  // rope(q, …, n_head, …) then rope(k, …, n_head_kv, …), forward, at the same positions: both in one
  // pass where the backend fuses them (a layer's Q and K). q and k must not overlap.
  void rope_qk(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head, int n_head_kv,
               int head_dim, const RopeParams& p);
  // Row-wise LayerNorm over the last dimension: y = (x − mean) / sqrt(var + eps) · w + b, with
  // the biased variance (BERT). x and y may alias.
  void layer_norm(const Tensor& x, const Weight& w, const Weight& b, float eps, const Tensor& y);
  // y = gelu(x) in the exact erf form x/2 · (1 + erf(x/√2)) (BERT's "gelu"; GeGLU uses the tanh
  // approximation). x and y may alias.
  void gelu_erf(const Tensor& x, const Tensor& y);
  // out = silu(gate) ⊙ up (SwiGLU) or gelu_tanh(gate) ⊙ up (GeGLU). out may alias gate or up.
  void swiglu(const Tensor& gate, const Tensor& up, const Tensor& out);
  void geglu(const Tensor& gate, const Tensor& up, const Tensor& out);
  // A layer's gated FFN: gate, up = xn · W_gate_upᵀ (a stack of two parts, no biases), gate =
  // silu(gate) ⊙ up (gelu_tanh(gate) ⊙ up when gelu: GeGLU), proj = gate · W_downᵀ, both products
  // with `act`: matmul_parts, swiglu / geglu and matmul as a model calls them, in one pass over the
  // intermediate where the backend fuses them (the CUDA backend's prefill: no f32 round trip
  // between the products). Those three ops' results: exactly, but for a backend that rounds the
  // intermediate once more to fuse (the CUDA prefill's f16 gate/up products: within the bound of
  // tests/ffn-f16-products-bound.h); gate and up [n][ff] are scratch that a fusing backend may
  // leave holding anything. xn, gate, up and proj pairwise disjoint.
  void glu_ffn(const Tensor& xn, const Weight& w_gate_up, const Weight& w_down, const Tensor& gate, const Tensor& up,
               const Tensor& proj, bool gelu, Activations act = Activations::f32);
  // a += b (residual add). a and b may alias (a doubles).
  void add(const Tensor& a, const Tensor& b);
  // x += y, then xn = rms_norm(x) · w: add then rms_norm, as one pass where the backend fuses them
  // (the residual add before a layer's FFN norm). Exactly add's and rms_norm's results. y
  // overlaps neither x nor xn; xn may alias x. `next`: the product of xn expected next (its
  // weight takes x.cols values) — matmul, matmul_parts or glu_ffn with xn as input, at those
  // activations; a backend that prepares its operand uses it only if that op is the next one.
  void add_rms_norm(const Tensor& x, const Tensor& y, const Weight& w, float eps, const Tensor& xn,
                    NextProduct next = {});
  // dst rows[rows[i]] = src row i, converting f32 → dst dtype (KV scatter). A row named twice
  // keeps the last write. src and dst must not overlap.
  void scatter_rows(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows);
  // scatter_rows(k, k_dst, rows) then scatter_rows(v, v_dst, rows): a layer's new K and V rows, in
  // one pass where the backend fuses them. k and v of one shape, k_dst and v_dst of one shape and
  // dtype; none of the four overlaps another.
  void scatter_kv_rows(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                       std::span<const int32_t> rows);
  // rope_qk(q, k, positions, …) then scatter_kv_rows(k, v, k_dst, v_dst, rows): a layer's Q and K
  // rotated and its new K and V rows written to the cache, in one pass where the backend fuses
  // them (the CUDA backend: one launch instead of two, K not read back). Exactly those two ops'
  // results, under both ops' conditions; q, k and v overlap neither each other nor a destination.
  void rope_qk_scatter_kv(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                          int n_head, int n_head_kv, int head_dim, const RopeParams& p, const Tensor& k_dst,
                          const Tensor& v_dst, std::span<const int32_t> rows);
  // matmul_parts(x, w, qkv, biases, act) then rope_qk_scatter_kv(qkv[0], qkv[1], qkv[2], positions, …):
  // a layer's Q, K and V products, rotated, and the new K and V rows written to the cache, in one
  // pass where the backend fuses them (the CUDA backend's decode steps: the GEMV stores its rows
  // rotated and scattered). Exactly those two ops' results, under both ops' conditions; w a stack
  // of three parts, x overlapping no output.
  void qkv_rope_scatter_kv(const Tensor& x, const Weight& w, std::span<const Tensor> qkv,
                           std::span<const Weight* const> biases, Activations act, std::span<const int32_t> positions,
                           int n_head, int n_head_kv, int head_dim, const RopeParams& p, const Tensor& k_dst,
                           const Tensor& v_dst, std::span<const int32_t> rows);
  // out row i = src row rows[i] (f32 gather of active rows). src and out must not overlap.
  void gather_rows(const Tensor& src, const Tensor& out, std::span<const int32_t> rows);
  // KV deviation (CacheBlend §4.1): out[i][0] = Σ_c (a[i][c] − b[rows[i]][c])² for a f32 [n][d]
  // and b f16 or f32 [≥ rows][d]; out f32 [n][1], overlapping neither. Ranks tokens for HKVD
  // selection (§4.3).
  void row_sq_dist(const Tensor& a, const Tensor& b, std::span<const int32_t> rows, const Tensor& out);
  // Attention of queries q [n_q][n_head·head_dim] at positions q_pos against KV rows [0, n_kv)
  // of k, v (f16 [≥n_kv][n_kv_head·head_dim]; f32 too, e.g. the encoder's own K/V; k and v of
  // one dtype) whose absolute positions are k_pos[0..n_kv).
  // Causal by position: a query at p sees keys at positions ≤ p (and inside the sliding window);
  // with p.causal == false every query sees all n_kv keys (positions unused, may be empty).
  // Grouped-query: query head h reads KV head h / (n_head / n_kv_head).
  // out [n_q][n_head·head_dim] must not overlap q, k or v. `next`: the product of out that comes
  // next, where the caller knows it (as add_rms_norm's).
  void attention(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k, const Tensor& v,
                 std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                 const Tensor& out, SegmentMass* seg_mass = nullptr, NextProduct next = {});

 protected:
  // What each backend implements. Called by the public functions above only after their checks,
  // with arguments that satisfy the contract written there (weights loaded by this backend,
  // tensors on it, dtypes it supports()), so an implementation checks only what is its own
  // (the CUDA backend: grid and cuBLAS int limits, weights stored as it needs them).
  virtual void copy_impl(const Tensor& src, const Tensor& dst) = 0;
  // parts: one tensor, or a stack's parts (checked: supported types, one in_features, data).
  virtual std::unique_ptr<Weight> load_weight_impl(std::span<const GgufTensor* const> parts, WeightMemory mem) = 0;
  virtual void embed_impl(const Weight& table, std::span<const int32_t> ids, const Tensor& out,
                          float scale) = 0;
  // outs: one output [n][out_features] for the whole weight, or one per part (matmul_parts);
  // biases: one per output, each null or a vector of that output's columns.
  virtual void matmul_impl(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                           std::span<const Weight* const> biases, Activations act) = 0;
  virtual void rms_norm_impl(const Tensor& x, const Weight& w, float eps, const Tensor& y) = 0;
  virtual void rope_impl(const Tensor& x, std::span<const int32_t> positions, int n_heads,
                         int head_dim, const RopeParams& p, bool inverse) = 0;
  virtual void layer_norm_impl(const Tensor& x, const Weight& w, const Weight& b, float eps,
                               const Tensor& y) = 0;
  virtual void gelu_erf_impl(const Tensor& x, const Tensor& y) = 0;
  virtual void swiglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void geglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
  virtual void add_impl(const Tensor& a, const Tensor& b) = 0;
  // Unfused by default: scatter_rows_impl for K, then for V.
  virtual void scatter_kv_rows_impl(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                                    std::span<const int32_t> rows) {
    scatter_rows_impl(k, k_dst, rows);
    scatter_rows_impl(v, v_dst, rows);
  }
  // Unfused by default: rope_qk_impl, then scatter_kv_rows_impl.
  virtual void rope_qk_scatter_kv_impl(const Tensor& q, const Tensor& k, const Tensor& v,
                                       std::span<const int32_t> positions, int n_head, int n_head_kv, int head_dim,
                                       const RopeParams& p, const Tensor& k_dst, const Tensor& v_dst,
                                       std::span<const int32_t> rows) {
    rope_qk_impl(q, k, positions, n_head, n_head_kv, head_dim, p);
    scatter_kv_rows_impl(k, v, k_dst, v_dst, rows);
  }
  // Unfused by default: matmul_impl, then rope_qk_scatter_kv_impl.
  virtual void qkv_rope_scatter_kv_impl(const Tensor& x, const Weight& w, std::span<const Tensor> qkv,
                                        std::span<const Weight* const> biases, Activations act,
                                        std::span<const int32_t> positions, int n_head, int n_head_kv, int head_dim,
                                        const RopeParams& p, const Tensor& k_dst, const Tensor& v_dst,
                                        std::span<const int32_t> rows) {
    matmul_impl(x, w, qkv, biases, act);
    rope_qk_scatter_kv_impl(qkv[0], qkv[1], qkv[2], positions, n_head, n_head_kv, head_dim, p, k_dst, v_dst, rows);
  }
  // Unfused by default: rope_impl on q, then on k.
  virtual void rope_qk_impl(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head,
                            int n_head_kv, int head_dim, const RopeParams& p) {
    rope_impl(q, positions, n_head, head_dim, p, /*inverse=*/false);
    rope_impl(k, positions, n_head_kv, head_dim, p, /*inverse=*/false);
  }
  // Unfused by default: matmul_impl into gate and up, swiglu_impl / geglu_impl into gate, matmul_impl.
  virtual void glu_ffn_impl(const Tensor& xn, const Weight& w_gate_up, const Weight& w_down, const Tensor& gate,
                            const Tensor& up, const Tensor& proj, bool gelu, Activations act);
  // Unfused by default: add_impl, then rms_norm_impl (the hint unused).
  virtual void add_rms_norm_impl(const Tensor& x, const Tensor& y, const Weight& w, float eps, const Tensor& xn,
                                 NextProduct next) {
    (void)next;
    add_impl(x, y);
    rms_norm_impl(x, w, eps, xn);
  }
  virtual void scatter_rows_impl(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows) = 0;
  virtual void gather_rows_impl(const Tensor& src, const Tensor& out, std::span<const int32_t> rows) = 0;
  virtual void row_sq_dist_impl(const Tensor& a, const Tensor& b, std::span<const int32_t> rows,
                                const Tensor& out) = 0;
  virtual void attention_impl(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k,
                              const Tensor& v, std::span<const int32_t> k_pos, int64_t n_kv,
                              const AttentionParams& p, const Tensor& out, SegmentMass* seg_mass,
                              NextProduct next) = 0;

 private:
  // Error unless t is a view of this backend's memory (inside its storage).
  void check_tensor(const Tensor& t, const char* op, const char* what) const;
  // Error unless in and out are f32 tensors of this backend with one shape that are either the
  // same view (in place) or disjoint (the element-wise and row-wise ops).
  void check_f32_pair(const Tensor& in, const Tensor& out, const char* op, const char* in_name,
                      const char* out_name) const;
  // Error unless w was loaded by this backend.
  void check_weight(const Weight& w, const char* op) const;
  // Error unless next names no product, or one of this backend's weights that takes x's rows.
  void check_next_product(NextProduct next, const Tensor& x, const char* op) const;
  // Error naming this backend unless it supports (op, dtype).
  void check_supported(BackendOp op, DType dtype) const;
  // scatter_rows's checks of one source and destination.
  void check_scatter(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows, const char* op) const;
  // The conditions of rope_qk's and scatter_kv_rows's arguments (op names the caller).
  void check_rope_qk(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head, int n_head_kv,
                     int head_dim, const RopeParams& p, const char* op) const;
  void check_scatter_kv(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                        std::span<const int32_t> rows, const char* op) const;
  // rope's checks of one tensor and its heads.
  void check_rope(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim, const RopeParams& p,
                  const char* op) const;
  // matmul's and matmul_parts' checks (outs: one for the whole weight, or one per part).
  void check_matmul(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                    std::span<const Weight* const> biases) const;
};

}  // namespace ragkv
