// The CUDA backend (DESIGN.md §3): device memory and the ops of core/backend/backend.h on one CUDA
// device, every op queued on one stream the backend owns. The CPU backend is the reference each
// op is tested against (tests/test-cuda-ops.cpp). Arguments are checked once, by the public ops
// of Backend (core/backend/backend-ops.cpp); this backend checks only its own limits (grid rows,
// cuBLAS's int dimensions, vector weights stored as f32).
//
// Implemented: memory; weights of every GGUF type the CPU backend accepts (matrices quantised or
// f16, vectors f32, see below); embed, matmul (cuBLAS, quantised GEMV), rms_norm, rope (f32 and f16 storage),
// layer_norm, gelu_erf, swiglu, geglu, add, copy (device to device), scatter_rows (into f32 or
// f16), gather_rows and row_sq_dist (against f32 or f16 rows), attention (cuda/attention.cu:
// fused, masked by absolute positions, optional segment mass; head_dim 32, 64, 128 or 256).
// Every op of core/backend/backend.h is implemented, with every dtype it defines: supports() is true
// wherever backend_op_defined() is.
//
// Weight storage. Vectors (out_features == 1: norm weights, biases) are dequantised to f32.
// Matrices of a quantised GGUF type the device decodes (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K,
// Q6_K; cuda/quant-decode.cuh) stay in their blocks, the file's bytes as they are, one buffer per
// stacked part: 4.5 bits per value for Q4_K, 6.6 for Q6_K, against 16 in f16, and a decode step
// reads each weight byte once. matmul then runs a dequantising GEMV for up to
// kQuantGemvMaxRows rows (f32 activations × the exact decoded values) and, for more rows, the
// f16 GEMM below on tiles dequantised to f16 in the work buffer (cuda/cuda-matmul.cpp); embed
// decodes the rows it gathers. RAGKV_CUDA_WEIGHTS=f16 in the environment converts these matrices
// to f16 at load instead (as every other matrix), 2 bytes per value, for comparison.
// Other matrices (F32, F16, BF16) are dequantised on the host exactly as the CPU backend does
// (core/format/quant.h), checked, and stored as f16 [out][in]. Why f16:
//  * precision: f16 keeps 11 significant bits, bf16 only 8. A dequantised Q4/Q8/K-quant value
//    (an f16 scale times a small integer, minus an f16 offset) or an f32 weight rounds to f16
//    with a relative error ≤ 2^-11, 8× less than in bf16; a bf16 weight (e.g. the random test
//    models' BF16 matrices) is exact in f16 unless it lies outside f16's normal range.
//  * speed: H100 tensor cores run f16 and bf16 GEMMs at the same rate (f32 accumulation), so
//    f16 costs nothing over bf16, and half the memory and bandwidth of f32.
//  * range: f16 stops at 65504, bf16 at 3e38. The weights of the models ragkv runs are orders of
//    magnitude smaller (the largest matrix value of the default models: 9.25 in SmolLM2-135M
//    Q4_1, 1.6 in gemma-3-270m Q4_K_M, 7.9 in all-MiniLM-L6-v2; ~0.1 % of their values fall
//    below f16's normal range, where the rounding error is an absolute 2^-25, instead), but
//    load_weight checks every value of every matrix, quantised ones included (their prefill
//    tiles are f16), and fails, naming the tensor and the element, when |w| > 65504 or w is not
//    finite, instead of storing inf.
// matmul rounds its f32 activations to f16 for the tensor cores (one cublasGemmEx over all rows,
// f32 accumulation); a row of activations that would overflow f16, or whose values would fall
// into f16's subnormal range, is scaled by a power of two first and back after (convert.cu).
//
// One caller at a time (the backend keeps staging buffers), from a thread whose current CUDA
// device is this backend's (the constructor makes it current on the constructing thread).
// Tensors and weights must be freed before the backend that allocated them.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/backend/backend.h"
#include "cuda/quant-dot.cuh"
#include "cuda/op-profile.h"
#include "cuda/rope.cuh"

namespace ragkv {

class CudaWeight;

// True when the CUDA runtime sees at least one device. Never throws: false without a driver,
// without a device, or when the runtime fails to initialise.
bool cuda_device_present();

// The backend on CUDA device `device` (0-based). Throws ragkv::Error naming the device when it
// does not exist or cannot be initialised.
std::unique_ptr<Backend> make_cuda_backend(int device);

// The writes of a scatter of rows that survive: for each destination row named more than once,
// only the last source row (the CPU backend's sequential loop leaves the last write). std::nullopt
// when no row repeats (the usual case: every source row is written; ascending rows in one pass).
std::optional<std::vector<int32_t>> surviving_writes(std::span<const int32_t> rows);

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }
  // The device, the weight storage and the attention kernels ("cuda:0 (NVIDIA H100 80GB
  // HBM3)+quant-weights+mma-attention"; "+f16-weights" under RAGKV_CUDA_WEIGHTS=f16,
  // "+f32-attention" under RAGKV_CUDA_ATTENTION=f32, "+f32-decode-acts" under
  // RAGKV_CUDA_DECODE_ACTS=f32, "+f32-ffn-products" under RAGKV_CUDA_FFN_PRODUCTS=f32): each choice
  // rounds differently. "+op-by-op-steps" under RAGKV_CUDA_GRAPHS=0 or RAGKV_CUDA_PROFILE: the same
  // values, another path (a device record vouches for the path it ran).
  std::string kernels() const override;
  void set_threads(int n) override;
  // 4,096 rows: an 8B model's 4,096-token prompt in one pass (its activations take about 1 GB, the
  // fused FFN's f16 operands 150 MB more) instead of eight micro-batches that each read every
  // weight again and give cuBLAS 512 rows.
  int64_t prefill_rows() const override { return 4096; }

  // ---- memory. upload and download return when the copy is complete; fill_zero and the ops
  // are queued on the stream (synchronize() waits for them).
  void* raw_alloc(size_t bytes) override;
  void raw_free(void* p) override;
  void upload(const Tensor& dst, const void* host_src) override;
  void download(const Tensor& src, void* host_dst) override;
  void fill_zero(const Tensor& t) override;
  void synchronize() override;
  // For tests: the pinned upload ring's first and largest sizes (eager_source), set before any
  // upload.
  void set_upload_ring_sizes(size_t first_bytes, size_t max_bytes) {
    upload_ring_min_ = first_bytes;
    upload_ring_max_ = max_bytes;
  }
  // Layer-wise loading: host data is copied into a pinned staging slot, then to the device on
  // copy_stream_ (after the compute work queued so far, which may still read the rows); the
  // compute stream waits for those copies at wait_uploads().
  // A source inside memory given to pin_host_memory (registered with cudaHostRegister) is copied
  // straight from there; any other is staged first.
  void upload_async(const Tensor& dst, const void* host_src) override;
  void wait_uploads() override;
  void pin_host_memory(const void* p, size_t bytes) override;
  void unpin_host_memory(const void* p) override;
  void set_profile_section(std::string_view name) override {
    if (profiler_) profiler_->set_section(name);
  }
  // Step graphs: a step captured as a CUDA graph (stream capture, relaxed mode), the previous
  // step's executable graph updated in place (cudaGraphExecUpdate; instantiated anew when the
  // topology changed), then launched once — and the steps after it replayed: their ops stage
  // only their uploads (token ids, positions, KV rows) into the pinned buffer the graph copies
  // from, and the same graph is launched again, captured once for as long as the ops and their
  // arguments stay the same (cuda-step-graph.cpp). On by default; off under RAGKV_CUDA_GRAPHS=0
  // and RAGKV_CUDA_PROFILE.
  bool begin_step() override;
  bool end_step() override;
  void abort_step() override;
  // For tests: how the steps ran since the backend was made.
  struct StepGraphStats {
    int64_t captured = 0;  // captured and launched
    int64_t replayed = 0;  // launched again without a capture
    int64_t missed = 0;    // tried as a replay, another step: run op by op, the next one captured
  };
  StepGraphStats step_graph_stats() const { return step_stats_; }
  // For tests: how many products took the operand add_rms_norm prepared for them (NextProduct).
  int64_t prepared_operands_used() const { return prepared_used_; }
  // How many qkv_rope_scatter_kv calls took the GEMV's rotating store (tests).
  int64_t qkv_rope_fused() const { return qkv_rope_fused_; }
  // How many glu_ffn calls took the gate/up GEMV that quantises the GLU (tests).
  int64_t glu_q8_fused() const { return glu_q8_fused_; }
  std::string step_summary() const override;

  bool supports(BackendOp op, DType dtype) const override;

  cudaStream_t stream() const { return stream_; }

 protected:
  void copy_impl(const Tensor& src, const Tensor& dst) override;

  // ---- weights: any type ggml_type_supported() accepts; matrices quantised or f16, vectors f32
  // (see above).
  // Throws ragkv::Error naming the tensor for a matrix value outside the f16 range (the type
  // and the data size were checked by Backend::load_weight).
  std::unique_ptr<Weight> load_weight_impl(std::span<const GgufTensor* const> parts, WeightMemory mem) override;

  // ---- ops
  void embed_impl(const Weight& table, std::span<const int32_t> ids, const Tensor& out,
                  float scale) override;
  // act: block8 sends a decode step's products on quantised weights to 8-bit activation blocks
  // and integer dot products (unless RAGKV_CUDA_DECODE_ACTS=f32); everything else meets f32
  // activations (cuda/cuda-matmul.cpp).
  void matmul_impl(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                   std::span<const Weight* const> biases, Activations act) override;
  void rms_norm_impl(const Tensor& x, const Weight& w, float eps, const Tensor& y) override;
  void rope_impl(const Tensor& x, std::span<const int32_t> positions, int n_heads, int head_dim,
                 const RopeParams& p, bool inverse) override;
  void rope_qk_impl(const Tensor& q, const Tensor& k, std::span<const int32_t> positions, int n_head, int n_head_kv,
                    int head_dim, const RopeParams& p) override;
  void layer_norm_impl(const Tensor& x, const Weight& w, const Weight& b, float eps,
                       const Tensor& y) override;
  void gelu_erf_impl(const Tensor& x, const Tensor& y) override;
  void swiglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void geglu_impl(const Tensor& gate, const Tensor& up, const Tensor& out) override;
  void add_impl(const Tensor& a, const Tensor& b) override;
  // With a hint of a decode product on 8-bit blocks (int8_operand_block), xn is quantised for it in
  // the same pass (rms-norm.cu's add_rms_norm_q8): prepared_.
  void add_rms_norm_impl(const Tensor& x, const Tensor& y, const Weight& w, float eps, const Tensor& xn,
                         NextProduct next) override;
  // cuda-ffn.cpp: prefill rows in one pass over the intermediate (glu-f16.cu); else unfused.
  void glu_ffn_impl(const Tensor& xn, const Weight& w_gate_up, const Weight& w_down, const Tensor& gate,
                    const Tensor& up, const Tensor& proj, bool gelu, Activations act) override;
  void scatter_rows_impl(const Tensor& src, const Tensor& dst, std::span<const int32_t> rows) override;
  void scatter_kv_rows_impl(const Tensor& k, const Tensor& v, const Tensor& k_dst, const Tensor& v_dst,
                            std::span<const int32_t> rows) override;
  // One launch (rope.cu) for f32 Q/K/V and rows that do not repeat; else the two ops.
  void rope_qk_scatter_kv_impl(const Tensor& q, const Tensor& k, const Tensor& v, std::span<const int32_t> positions,
                               int n_head, int n_head_kv, int head_dim, const RopeParams& p, const Tensor& k_dst,
                               const Tensor& v_dst, std::span<const int32_t> rows) override;
  // cuda-matmul.cpp: a decode step's QKV GEMV (f16 weights, or the integer GEMV on Q4_K, Q5_K, Q6_K,
  // Q8_0 and the K-quant pairs) storing its rows rotated and scattered, one launch (unless
  // RAGKV_CUDA_GEMV_STORES=separate); else the two ops.
  void qkv_rope_scatter_kv_impl(const Tensor& x, const Weight& w, std::span<const Tensor> qkv,
                                std::span<const Weight* const> biases, Activations act,
                                std::span<const int32_t> positions, int n_head, int n_head_kv, int head_dim,
                                const RopeParams& p, const Tensor& k_dst, const Tensor& v_dst,
                                std::span<const int32_t> rows) override;
  void gather_rows_impl(const Tensor& src, const Tensor& out, std::span<const int32_t> rows) override;
  void row_sq_dist_impl(const Tensor& a, const Tensor& b, std::span<const int32_t> rows,
                        const Tensor& out) override;
  // On the split-K route, with a hint of a decode product on 8-bit blocks, out is quantised for
  // it by the combine kernel (attention-decode.cu): prepared_.
  void attention_impl(const Tensor& q, std::span<const int32_t> q_pos, const Tensor& k, const Tensor& v,
                      std::span<const int32_t> k_pos, int64_t n_kv, const AttentionParams& p,
                      const Tensor& out, SegmentMass* seg_mass, NextProduct next) override;

 private:
  int device_ = 0;
  std::string name_;                // "cuda:0 (NVIDIA H100 80GB HBM3)"
  cudaStream_t stream_ = nullptr;   // every copy and kernel of this backend
  cublasHandle_t cublas_ = nullptr; // bound to stream_; matmul's GEMMs
  void* cublas_workspace_ = nullptr; // the handle's workspace (cuBLAS's recommended size for the chip)
  bool keep_quantised_ = true;      // RAGKV_CUDA_WEIGHTS: quantised matrices stay quantised (default)
  bool f16_prefill_copy_ = false;   // RAGKV_CUDA_WEIGHTS=quant+f16: and an f16 copy for prefill GEMMs
  bool int8_decode_ = true;         // RAGKV_CUDA_DECODE_ACTS: block8 decode products in dp4a (default)
  bool f16_ffn_products_ = true;    // RAGKV_CUDA_FFN_PRODUCTS: prefill gate/up products in f16 (default)
  bool fused_gemv_stores_ = true;   // RAGKV_CUDA_GEMV_STORES: decode GEMVs rotate, scatter, quantise the GLU
  // RAGKV_CUDA_PROFILE=FILE: every op's device time (op-profile.h), written at destruction.
  std::unique_ptr<CudaOpProfiler> profiler_;
  // Times one op under `op` (a literal: "matmul/gemv-f16") when profiling, else nothing.
  CudaOpProfiler::Scope profile(const char* op, int64_t rows) {
    return profiler_ ? CudaOpProfiler::Scope(profiler_.get(), op, rows) : CudaOpProfiler::Scope();
  }

  // upload_async: its own stream, pinned staging slots (reused once their copy has completed),
  // and the events that order the two streams.
  struct PinnedSlot {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // recorded on copy_stream_ after the slot's copy
  };
  cudaStream_t copy_stream_ = nullptr;
  std::vector<PinnedSlot> slots_;
  cudaEvent_t compute_mark_ = nullptr;  // compute work queued before an upload batch
  cudaEvent_t uploads_done_ = nullptr;  // every upload of the batch
  bool batch_open_ = false;             // upload_async calls since the last wait_uploads
  PinnedSlot& free_slot(size_t bytes);
  // pin_host_memory's registered ranges: start → bytes.
  std::map<const uint8_t*, size_t> registered_;
  bool registered_range(const void* p, size_t bytes) const;

  // Per-op parameters that live on the host (rope positions and frequencies, token ids, row
  // indices) go to the device through one grow-only scratch buffer, staged in host_staging_ and
  // copied in one transfer.
  // Reuse across ops is safe because every use is ordered on stream_.
  void* scratch_ = nullptr;         // device bytes [scratch_bytes_]
  size_t scratch_bytes_ = 0;
  std::vector<uint8_t> host_staging_;
  std::vector<int32_t> tile_bounds_;  // attention's key tile bounds, staged after the positions
  void* scratch_upload(size_t bytes);  // copies host_staging_[0, bytes) to scratch_, returns it
  // Parameters every layer of a prefill or decode step passes again unchanged (attention's
  // positions and segment boundaries; rope's positions and frequencies; scatter_rows's KV rows,
  // the same for K and V and every layer), kept on the device in a
  // buffer of their own per op: only the first layer's call copies them, the bytes last copied
  // kept on the host to compare.
  struct RepeatedUpload {
    void* device = nullptr;  // device bytes [capacity]
    size_t capacity = 0;
    std::vector<uint8_t> host;  // what device holds
  };
  RepeatedUpload attention_params_, rope_params_, scatter_params_;
  std::array<RepeatedUpload*, 3> repeated_uploads() { return {&attention_params_, &rope_params_, &scatter_params_}; }
  // host_staging_ on the device in u's buffer, copied only when it differs from the last copy.
  const void* upload_if_changed(RepeatedUpload& u);

  // Split-K decode attention in a step graph covers the key count rounded up to this many keys,
  // read on the device (AttentionArgs::n_kv_device): the step's parameters hold for 1,024 steps.
  static constexpr int64_t kStepKeyBucket = 1024;
  // The words ops fold (step_op): which op, and their arguments.
  enum class StepOp : uint64_t {
    embed = 1, matmul, rms_norm, rope, rope_qk, layer_norm, gelu_erf, swiglu, geglu, add, add_rms_norm, glu_ffn,
    scatter_rows, scatter_kv_rows, gather_rows, row_sq_dist, attention, upload, repeated_upload, rope_qk_scatter_kv,
    qkv_rope_scatter_kv
  };
  // Step graphs (begin_step). While capturing, uploads copy from pinned host memory (a graph's
  // memcpy nodes read their source when the graph runs; pageable memory cannot be captured), and
  // a device buffer that must grow is replaced, the old one freed once the step has run.
  bool graphs_ = true;               // not RAGKV_CUDA_GRAPHS=0, no profiler, no failures yet
  bool op_by_op_steps_ = false;      // steps never recorded (RAGKV_CUDA_GRAPHS=0, the profiler): kernels()
  bool report_step_graphs_ = false;  // RAGKV_CUDA_GRAPHS set: the step counts on stderr at the end
  bool capturing_ = false;
  // Replay (cuda-step-graph.cpp): between begin_step and end_step the ops run their host side only
  // — their arguments folded into step_signature_, their uploads staged where the graph's copies
  // read them — and launch nothing; end_step launches step_exec_ again when the signature, the
  // number of pinned bytes staged and the backend's buffers are the recorded step's.
  bool replaying_ = false;
  int same_captures_ = 0;            // captured steps in a row alike, the last recorded_step_
  int replay_after_ = 2;             // alike captures before a replay: doubled (to 64) by each
                                     // replay missed at once, back to 2 after one launched
  bool replayed_since_ready_ = false;
  // step_exec_ (the last step recorded) may be replayed.
  bool replay_ready() const { return same_captures_ >= replay_after_; }
  uint64_t step_signature_ = 0;
  int op_depth_ = 0;                 // ops running inside another (glu_ffn's products): not folded
  struct StepRecord {
    uint64_t signature = 0;
    size_t pinned_used = 0;
    std::array<const void*, 8> buffers{};  // work, scratch, the three repeated uploads, pinned, operands
  } recorded_step_;
  StepGraphStats step_stats_;
  std::array<const void*, 8> step_buffers() const {
    return {work_,          scratch_,     attention_params_.device, rope_params_.device, scatter_params_.device,
            capture_host_, operand_q8_, operand_f16_};
  }
  // Called first by every op: while a step is recorded or replayed, folds the op and its
  // arguments into step_signature_ (not for an op inside another); true when the op must launch
  // nothing (a replay). Ops that upload stage their uploads first and return before launching.
  // Drops the prepared operand (below) for every op but a product.
  bool step_op(StepOp op, std::initializer_list<uint64_t> args);
  void step_fold(std::initializer_list<uint64_t> words);  // more words of the op, as step_op
  // A product's operand made by the op before it (add_rms_norm or attention with a NextProduct
  // hint): for a decode product, xn's 8-bit activation blocks of `block` values in operand_q8_; for
  // a prefill GEMM (add_rms_norm only), xn's row-scaled f16 operand and row unscales in
  // operand_f16_, scaled for products written in f16 below 2^top (top ≥ 0: glu_ffn's gate/up) or
  // plainly (−1). Valid for the one next op — the product of exactly that tensor by that weight
  // takes them (matmul_impl, glu_ffn_impl) instead of making them again; any other op drops them
  // (step_op, and the ops that write device memory without it).
  struct PreparedOperand {
    const void* data = nullptr;  // xn
    int64_t rows = 0, cols = 0;
    const Weight* weight = nullptr;
    int block = 0;               // 32 or 256; 0: no 8-bit blocks
    quant_dot::ActQ8 acts;
    bool f16 = false;            // the f16 operand instead
    int top = -1;
    __half* xh = nullptr;        // [rows][cols]
    float* unscale = nullptr;    // [rows]
    // x's 8-bit blocks of `block` values (not 0) for w, where they are these.
    bool blocks_for(const Tensor& x, const Weight& w, int for_block) const {
      return for_block != 0 && block == for_block && of(x, w);
    }
    // The f16 operand of x by w at `top`, where it is this one.
    bool f16_for(const Tensor& x, const Weight& w, int product_top) const {
      return f16 && top == product_top && of(x, w);
    }
    bool of(const Tensor& x, const Weight& w) const {
      return data == x.data() && rows == x.rows && cols == x.cols && weight == &w;
    }
  };
  PreparedOperand prepared_;
  int64_t prepared_used_ = 0;
  int64_t qkv_rope_fused_ = 0;
  int64_t glu_q8_fused_ = 0;
  void* operand_q8_ = nullptr;  // device bytes [operand_q8_bytes_]: the prepared blocks
  size_t operand_q8_bytes_ = 0;
  void* operand_f16_ = nullptr;  // device bytes [operand_f16_bytes_]: the prepared f16 operand
  size_t operand_f16_bytes_ = 0;
  // Split-K's counters per KV head (AttentionArgs::decode_done): as many as attention_cuda allows
  // KV heads, zeroed at construction and left zero by every call.
  static constexpr size_t kDecodeDoneCounters = 65536;
  // Then the decode GLU's chunk counters (int8_gemv_glu_q8_cuda), one per activation block of an
  // intermediate row, in the same allocation: glu_done().
  static constexpr size_t kGluDoneCounters = 16384;
  void* decode_done_ = nullptr;
  unsigned* glu_done() const { return static_cast<unsigned*>(decode_done_) + kDecodeDoneCounters; }
  // The activation block size of cw's decode product by n ≤ kQuantGemvMaxRows rows on 8-bit blocks
  // (the integer GEMV of matmul_impl), 0 where that product takes another path or its parts read
  // blocks of both sizes.
  int int8_operand_block(const CudaWeight& cw, const Weight& w, int64_t n, Activations act) const;
  // The block size in which the op running writes its [rows][cols] output's 8-bit blocks for the
  // product `next` (0: it does not), with room for them in operand_q8_ — called before step_op (a
  // buffer that must grow is no replay). prepare_operand then records them as that product's
  // operand and says where to write them — after step_op and the op's uploads, which drop it.
  int operand_block_for(NextProduct next, int64_t rows, int64_t cols);
  quant_dot::ActQ8Out prepare_operand(const Tensor& out, const Weight* weight, int block);
  // The same for a prefill GEMM's f16 operand: the product_top `next` scales it for (−1 plain), or
  // nullopt where that product is no f16 GEMM (decode rows, an f32 weight), with room in
  // operand_f16_; then prepare_f16_operand records it (after step_op) and says where it goes.
  std::optional<int> f16_operand_for(NextProduct next, int64_t rows, int64_t cols);
  const PreparedOperand& prepare_f16_operand(const Tensor& out, const Weight* weight, int top);
  // An upload, fill or copy (device memory written outside the ops' bookkeeping): not in a replay,
  // and the prepared operand dropped.
  void untracked_write(const char* what);
  // Ops an op runs inside itself (glu_ffn's products) are not folded: a replay skips them.
  struct NestedOps {
    int& depth;
    explicit NestedOps(int& d) : depth(d) { ++depth; }
    ~NestedOps() { --depth; }
    NestedOps(const NestedOps&) = delete;
    NestedOps& operator=(const NestedOps&) = delete;
  };
  static uint64_t step_key(StepOp op) { return static_cast<uint64_t>(op); }
  static uint64_t step_key(const void* p) { return reinterpret_cast<uintptr_t>(p); }
  static uint64_t step_key(float v) {
    uint32_t bits = 0;
    static_assert(sizeof bits == sizeof v);
    std::memcpy(&bits, &v, sizeof v);
    return bits;
  }
  // A weight by its device memory and storage (cuda-step-graph.cpp): a weight freed and another
  // loaded at the same host address is another weight.
  static uint64_t step_key(const Weight& w);
  static uint64_t step_key(const Tensor& t) {  // where it is and its shape, mixed into one word
    uint64_t h = reinterpret_cast<uintptr_t>(t.data());
    for (const uint64_t v : {uint64_t(t.rows), uint64_t(t.cols), uint64_t(t.dtype)}) h = (h ^ v) * 0x100000001b3ull;
    return h;
  }
  // While replaying: an op a step graph cannot hold (a copy to or from the host, a sync), or a
  // buffer that would have to grow: the replay is given up (throws; the model runs the step op by
  // op, and the next step is captured).
  void no_replay(const char* what) const;
  void forget_repeated_uploads();  // the device no longer holds what their host copies say
  void replay_missed();
  bool capture_failed_ = false;      // something could not be captured: the step runs unrecorded
  int graph_failures_ = 0;           // steps that could not be launched as graphs (3: graphs off)
  cudaGraphExec_t step_exec_ = nullptr;
  void* capture_host_ = nullptr;     // pinned [capture_host_bytes_]
  size_t capture_host_bytes_ = 0, capture_host_used_ = 0, capture_host_needed_ = 0;
  std::vector<void*> deferred_free_;
  // host_staging_[0, bytes) where a copy to the device may read it: while capturing a pinned copy
  // (nullptr when the pinned buffer is full: the capture then fails), else a copy in the upload
  // ring (eager_source).
  const void* staged_source(size_t bytes);
  // Outside a capture: host_staging_[0, bytes) copied into a slice of a pinned ring, so that
  // cudaMemcpyAsync returns at once — from pageable memory the driver stages the copy itself and
  // may wait for the stream first, and a decode step's host would then not run ahead of the
  // device. The ring is reused from its start once the stream has run every copy from it
  // (stream_synced(): a decode step downloads its logits, a sync, every step). A ring that fills
  // between two syncs (a batch's attention positions over long contexts) is replaced by one twice
  // its size, up to upload_ring_max_, the full one freed at the next sync (copies may still read
  // it); at that size a full ring waits for the stream. Uploads over a quarter of the largest
  // ring, and a failed pinned allocation: host_staging_ itself.
  const void* eager_source(size_t bytes);
  void stream_synced();  // after a sync of stream_, outside a capture: the ring's copies have run
  void* upload_ring_ = nullptr;  // pinned [upload_ring_bytes_]
  size_t upload_ring_bytes_ = 0, upload_ring_used_ = 0;
  size_t upload_ring_min_ = size_t(1) << 20, upload_ring_max_ = size_t(64) << 20;
  bool upload_ring_failed_ = false;
  std::vector<void*> retired_rings_;  // pinned, freed at the next stream_synced()
  // Forget device contents the lost graph would have written; count_failure: toward the three
  // failures that turn graphs off.
  void step_not_launched(bool count_failure = true);
  void free_deferred();

  // scatter_rows's and scatter_kv_rows's row indices on the device: destination rows [n], and
  // the source row of each (null: row i for write i).
  struct ScatterRows {
    const int32_t* dst = nullptr;
    const int32_t* src = nullptr;
    int64_t n = 0;
  };
  ScatterRows scatter_rows_on_device(std::span<const int32_t> rows);
  // rope's and rope_qk's positions and frequencies on the device, and their launch geometry.
  struct RopeLaunch {
    const int32_t* positions = nullptr;
    const float* inv_freq = nullptr;
    RopeShape shape;
  };
  RopeLaunch rope_launch(std::span<const int32_t> positions, int64_t rows, int n_heads, int head_dim,
                         const RopeParams& p, bool inverse);

  // Deferred key totals (SegmentMass::deferred): each call's totals in a device buffer of its own
  // (entries [0, mass_pending_) hold results not yet copied back), copied to their host vectors by
  // synchronize().
  struct PendingMass {
    void* device = nullptr;
    size_t capacity = 0;  // bytes
    std::vector<float>* out = nullptr;
  };
  std::vector<PendingMass> mass_buffers_;
  size_t mass_pending_ = 0;
  float* pending_mass_buffer(std::vector<float>* out, size_t floats);
  void copy_back_pending_mass();

  // Device intermediates of one op (matmul's f16 activations and row scales, load_weight's f32
  // rows before conversion): one grow-only buffer, safe to reuse for the same stream-order reason.
  void* work_ = nullptr;            // device bytes [work_bytes_]
  size_t work_bytes_ = 0;
  void* work_reserve(size_t bytes);  // work_ with at least `bytes` bytes
  // Grows a device buffer to at least `bytes` (waiting for queued work before freeing the old one;
  // while capturing, the old one is freed after the step). `geometric`: by half its size at least
  // (parameter buffers that grow a little every decode step).
  void grow_device_buffer(void*& buffer, size_t& capacity, size_t bytes, bool geometric = false);
  // Checks that `rows` fit one grid dimension (one block per row) for `op`.
  void check_grid_rows(int64_t rows, const char* op) const;
  // load_weight: one GGUF matrix into f16 rows at dst (a stack's parts one after the other);
  // returns its largest absolute row sum (CudaWeight::max_row_l1).
  double upload_f16_rows(const GgufTensor& t, __half* dst);
  // load_weight: a matrix kept in its quantised blocks (every part device-decodable).
  // mem: an f16 copy is added (RAGKV_CUDA_WEIGHTS=quant+f16) only for kernel_layout (products).
  std::unique_ptr<Weight> load_quantised(std::span<const GgufTensor* const> parts, int64_t rows, int64_t cols,
                                         WeightMemory mem);
  // matmul (cuda-matmul.cpp): y (row stride ldy, f32 or f16 by y_type) = xh · Wᵀ for f16 W [rows][in]
  // and xh [n][in].
  void gemm_f16_rows(const __half* w, int64_t rows, int64_t in, const __half* xh, int64_t n, void* y,
                     cudaDataType y_type, int64_t ldy);
  // matmul through cuBLAS on f16 operands: an f16 matrix, or a quantised one in dequantised tiles.
  // f16_operand: x's operand made by the op before (PreparedOperand::f16_for), or null.
  void matmul_gemm(const Tensor& x, const CudaWeight& cw, std::span<const Tensor> outs,
                   std::span<const Weight* const> biases, const PreparedOperand* f16_operand = nullptr);
  // Its GEMMs from an f16 operand xh [n][in], no epilogue (`tile`: dequant_tile_bytes of work);
  // f16_products: written in f16 into the first half of each output's memory.
  void gemm_into(const __half* xh, int64_t n, const CudaWeight& cw, std::span<const Tensor> outs, __half* tile,
                 bool f16_products = false);
  static int64_t dequant_tile_rows(const CudaWeight& cw);  // 0 for an f16 matrix
  static size_t dequant_tile_bytes(const CudaWeight& cw);
  // matmul of a quantised weight by a few rows: one GEMV per part (per run of parts of one type)
  // into its output; with acts, on those 8-bit activation blocks (integer products), else on x.
  using Int8Acts = std::array<quant_dot::ActQ8, 2>;  // by block size: [0] 32 values, [1] 256
  void matmul_quant_gemv(const Tensor& x, const CudaWeight& cw, std::span<const Tensor> outs,
                         std::span<const Weight* const> biases, const Int8Acts* acts);
  // The activation blocks cw's parts read, each block size quantised once, by quantise(block, work)
  // into the work buffer.
  Int8Acts int8_acts_for(const CudaWeight& cw, int64_t n,
                         const std::function<quant_dot::ActQ8(int block, void* work)>& quantise);
  // matmul of a stack into its parts' outputs: y [n][out_features] → outs[p], plus biases[p].
  void matmul_split_outputs(const float* y, const Weight& w, std::span<const Tensor> outs,
                            std::span<const Weight* const> biases);
};

}  // namespace ragkv
