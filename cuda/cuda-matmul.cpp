// The CUDA backend's matmul (host side): y [n][out] = x [n][in] · Wᵀ (+ bias), by the weight's
// storage (cuda-backend.h, "Weight storage"):
//  * f16 matrix, n ≤ kQuantGemvMaxRows and rows of whole 8-value groups (decode steps): the f16
//    GEMV of quant-matmul.cu, f32 activations times the f16 weights, bias in the kernel;
//  * f16 matrix, more rows: x rounded to f16 (row-scaled where it would overflow), one cuBLAS GEMM
//    with f32 accumulation (one per part of a stack split into its outputs, each written in place
//    with its own row stride), then the epilogue (row unscale, bias);
//  * quantised matrix, n ≤ kQuantGemvMaxRows (decode steps, short recompute batches): one GEMV per
//    part, bias added in the kernel, straight into each part's output — the weight's bytes read
//    once. A decode step's products (Activations::block8, as the CPU backend's) quantise x to
//    8-bit blocks on the device and run integer dot products (int8-gemv.cu); other calls, and
//    RAGKV_CUDA_DECODE_ACTS=f32, multiply f32 activations by the decoded weights (quant_gemv);
//  * quantised matrix, more rows (prefill): each part dequantised a tile of rows at a time into
//    f16 in the work buffer (the values an f16 matrix would hold, bit for bit) and the same GEMM
//    per tile, so a prefill costs the f16 path's GEMMs plus one pass over the weight per call
//    (under RAGKV_CUDA_WEIGHTS=quant+f16, the GEMM on the weight's f16 copy instead);
//  * f32 vector weight (out_features == 1): an f32 GEMM.
// A stack's parts go to their own outputs (outs[p] ↔ part p), or all into one output. (Splitting
// a whole product afterwards copied it once more: for an 8B model's gate/up stack, 0.9 GB per
// layer of a 4,096-token prefill.)
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "core/util/error.h"
#include "cuda/convert.cuh"
#include "cuda/cublas-loader.h"
#include "cuda/cuda-backend.h"
#include "cuda/cuda-check.h"
#include "cuda/cuda-weight.h"
#include "cuda/int8-gemv.cuh"
#include "cuda/quant-matmul.cuh"

namespace ragkv {

namespace {

// The f16 tile of a quantised weight dequantised for one GEMM: about this many values (64 MiB).
constexpr int64_t kDequantTileValues = int64_t(1) << 25;

void check_int_dim(int64_t v, const char* what, const char* op) {
  if (v > std::numeric_limits<int>::max())
    fail("internal: CUDA {}: {} = {} exceeds cuBLAS's int range", op, what, v);
}

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// A GEMV's outputs for a stack's parts into their own outputs (outs[p] ↔ part p, at most
// GemvOutputs::kMaxParts), each with its bias where given.
GemvOutputs part_outputs(const Weight& w, std::span<const Tensor> outs, std::span<const Weight* const> biases) {
  GemvOutputs go;
  go.parts = int(outs.size());
  for (size_t p = 0; p < outs.size(); ++p) {
    go.first[p + 1] = go.first[p] + w.part_rows[p];
    go.y[p] = outs[p].as<float>();
    go.ld[p] = w.part_rows[p];
    go.bias[p] = biases[p] ? cuda_vector(*biases[p], "matmul bias").f32() : nullptr;
  }
  return go;
}

}  // namespace

void CudaBackend::matmul_impl(const Tensor& x, const Weight& w, std::span<const Tensor> outs,
                              std::span<const Weight* const> biases, Activations act) {
  const CudaWeight& cw = cuda_weight(w);
  const int64_t n = x.rows, in = w.in_features, out = w.out_features;
  if (n == 0) return;
  check_int_dim(n, "rows", "matmul");
  check_int_dim(in, "in_features", "matmul");
  check_int_dim(out, "out_features", "matmul");
  check_grid_rows(n, "matmul");
  // x's blocks made by the op just before (add_rms_norm's hint), where they are this product's.
  const PreparedOperand prepared = std::exchange(prepared_, {});
  const int block = int8_operand_block(cw, w, n, act);
  const bool use_prepared = prepared.blocks_for(x, w, block);
  // Or x's f16 operand for the GEMM below (add_rms_norm's, for a prefill).
  const bool use_f16 = prepared.f16_for(x, w, /*product_top=*/-1);
  const bool replay =
      step_op(StepOp::matmul, {step_key(x), step_key(w), uint64_t(act), outs.size(), use_prepared, use_f16});
  for (size_t p = 0; p < outs.size(); ++p)
    step_fold({step_key(outs[p]), p < biases.size() && biases[p] ? step_key(*biases[p]) : 0});
  if (replay) return;
  const bool gemv_f16 = cw.dtype() == DType::f16 && !cw.quantised() && n <= kQuantGemvMaxRows && in % 8 == 0;
  const bool int8_acts = act == Activations::block8 && int8_decode_ && !w.wide_activations;
  const auto timed = profile(cw.quantised()   ? (n > kQuantGemvMaxRows ? (cw.has_f16() ? "matmul/gemm-f16-copy"
                                                                                          : "matmul/gemm-quant-tiles")
                                                 : int8_acts            ? "matmul/gemv-int8"
                                                                        : "matmul/gemv-quant")
                             : gemv_f16        ? "matmul/gemv-f16"
                             : cw.dtype() == DType::f16 ? "matmul/gemm-f16"
                                                         : "matmul/gemm-f32",
                             n);
  if (cw.quantised() && n <= kQuantGemvMaxRows) {
    if (!int8_acts) {
      matmul_quant_gemv(x, cw, outs, biases, nullptr);
      return;
    }
    Int8Acts acts;
    if (use_prepared) {
      acts[block == 256] = prepared.acts;
      ++prepared_used_;
    } else {
      acts = int8_acts_for(cw, n, [&](int b, void* work) {
        return quantize_act_q8_cuda(x.as<float>(), n, in, b, work, stream_);
      });
    }
    matmul_quant_gemv(x, cw, outs, biases, &acts);
    return;
  }
  const bool split = outs.size() > 1;  // a stack's parts into their own outputs
  const float* d_bias = !split && biases[0] ? cuda_vector(*biases[0], "matmul bias").f32() : nullptr;

  // y in the work buffer when it is split afterwards, else the output itself.
  const size_t y_bytes = split ? round_up_256(static_cast<size_t>(n * out) * sizeof(float)) : 0;
  if (gemv_f16 && (!split || outs.size() <= size_t(GemvOutputs::kMaxParts))) {
    // A few rows on an f16 matrix: the GEMV reads the weight once, a stack's rows straight into
    // their parts' outputs.
    GemvOutputs go;
    if (!split) {
      go.first[1] = out;
      go.y[0] = outs[0].as<float>();
      go.ld[0] = out;
      go.bias[0] = d_bias;
    } else {
      go = part_outputs(w, outs, biases);
    }
    f16_gemv_parts_cuda(cw.f16(), out, in, x.as<float>(), n, go, stream_);
    return;
  }
  if (gemv_f16) {  // a stack of more parts than one launch writes: whole, then split
    float* y = static_cast<float*>(work_reserve(y_bytes));
    f16_gemv_cuda(cw.f16(), out, in, x.as<float>(), n, y, out, d_bias, stream_);
    matmul_split_outputs(y, w, outs, biases);
    return;
  }
  if (cw.dtype() == DType::f16) {
    if (use_f16) ++prepared_used_;
    matmul_gemm(x, cw, outs, biases, use_f16 ? &prepared : nullptr);
  } else {  // an f32 vector weight (out_features == 1)
    auto* work = static_cast<uint8_t*>(split ? work_reserve(y_bytes) : nullptr);
    float* y = split ? reinterpret_cast<float*>(work) : outs[0].as<float>();
    const float one = 1.f, zero = 0.f;
    CUBLAS_CHECK(cublas::api().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(out), int(n), int(in), &one,
                                       cw.f32(), CUDA_R_32F, int(in), x.as<float>(), CUDA_R_32F, int(in), &zero,
                                       y, CUDA_R_32F, int(out), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    matmul_epilogue_f32_cuda(y, nullptr, d_bias, n, out, stream_);
    if (split) matmul_split_outputs(y, w, outs, biases);
  }
}

// A layer's Q, K and V products, rotated and scattered into the cache: where a decode step's
// product takes the f16 GEMV or the integer GEMV in one launch (its parts' types in
// int8_gemv_rope_types), that launch stores the rows so (gemv-rope-store.cuh) — matmul_impl's
// GEMV, then rope_qk_scatter_kv_impl's kernel, bit for bit, without the second launch. Anything
// else (prefill, repeated cache rows, other types, RAGKV_CUDA_GEMV_STORES=separate): the two ops.
void CudaBackend::qkv_rope_scatter_kv_impl(const Tensor& x, const Weight& w, std::span<const Tensor> qkv,
                                           std::span<const Weight* const> biases, Activations act,
                                           std::span<const int32_t> positions, int n_head, int n_head_kv,
                                           int head_dim, const RopeParams& p, const Tensor& k_dst,
                                           const Tensor& v_dst, std::span<const int32_t> rows) {
  const CudaWeight& cw = cuda_weight(w);
  const int64_t n = x.rows, in = w.in_features;
  const int block = int8_operand_block(cw, w, n, act);
  const bool f16 = cw.dtype() == DType::f16 && !cw.quantised() && n <= kQuantGemvMaxRows && in % 8 == 0;
  const auto parts = cw.parts();
  // The integer GEMV's launch: one type, or Q and K of one type and V of its pair.
  const bool int8 = block != 0 && parts.size() == 3 && parts[0].type == parts[1].type &&
                    int8_gemv_rope_types(parts[0].type, parts[2].type);
  // A cache row named twice: the scatter's last-write rule, not this store.
  const bool repeats = (f16 || int8) && surviving_writes(rows).has_value();
  if (!fused_gemv_stores_ || (!f16 && !int8) || n == 0 || p.n_rot / 2 == 0 || head_dim % 2 != 0 || repeats ||
      w.part_rows.size() != 3) {
    Backend::qkv_rope_scatter_kv_impl(x, w, qkv, biases, act, positions, n_head, n_head_kv, head_dim, p, k_dst, v_dst,
                                      rows);
    return;
  }
  // x's blocks made by the op just before (add_rms_norm's hint), as matmul_impl takes them.
  const PreparedOperand prepared = std::exchange(prepared_, {});
  const bool use_prepared = int8 && prepared.blocks_for(x, w, block);
  const bool replay = step_op(StepOp::qkv_rope_scatter_kv,
                              {step_key(x), step_key(w), uint64_t(act), use_prepared, step_key(k_dst),
                               step_key(v_dst), uint64_t(n_head), uint64_t(n_head_kv), uint64_t(head_dim),
                               uint64_t(p.n_rot), step_key(p.freq_scale), p.neox});
  for (size_t i = 0; i < 3; ++i) step_fold({step_key(qkv[i]), biases[i] ? step_key(*biases[i]) : 0});
  const auto timed = profile(f16 ? "qkv_rope_scatter_kv/gemv-f16" : "qkv_rope_scatter_kv/gemv-int8", n);
  const RopeLaunch r = rope_launch(positions, n, n_head, head_dim, p, /*inverse=*/false);
  const ScatterRows dst = scatter_rows_on_device(rows);
  step_fold({uint64_t(dst.n)});
  if (replay) return;
  ++qkv_rope_fused_;

  const GemvOutputs go = part_outputs(w, qkv, biases);
  GemvRope rope;
  rope.positions = r.positions;
  rope.inv_freq = r.inv_freq;
  rope.dst_rows = dst.dst;
  rope.k_dst = k_dst.data();
  rope.v_dst = v_dst.data();
  rope.dst_f16 = k_dst.dtype == DType::f16;
  rope.neox = p.neox;
  rope.head_dim = head_dim;
  rope.half = p.n_rot / 2;
  rope.freq_scale = p.freq_scale;
  rope.kv_cols = k_dst.cols;
  if (f16) {
    f16_gemv_rope_cuda(cw.f16(), w.out_features, in, x.as<float>(), n, go, rope, stream_);
    return;
  }
  quant_dot::ActQ8 a;
  if (use_prepared) {
    a = prepared.acts;
    ++prepared_used_;
  } else {
    a = int8_acts_for(cw, n, [&](int b, void* work) {
      return quantize_act_q8_cuda(x.as<float>(), n, in, b, work, stream_);
    })[block == 256];
  }
  GemvWeights gw;
  for (size_t i = 0; i < 3; ++i) gw.part[i] = parts[i].data;
  const int64_t first1 = parts[2].type == parts[0].type ? w.out_features : go.first[2];
  int8_gemv_rope_cuda(parts[0].type, parts[2].type, first1, gw, in, a, n, go, rope, stream_);
}

// Rows of a quantised weight's f16 tile: about kDequantTileValues values, at most its largest
// part; 0 for an f16 matrix.
int64_t CudaBackend::dequant_tile_rows(const CudaWeight& cw) {
  if (cw.has_f16()) return 0;
  int64_t largest_part = 0;
  for (const QuantPart& p : cw.parts()) largest_part = std::max(largest_part, p.rows);
  return std::min(largest_part, std::max<int64_t>(1, kDequantTileValues / cw.in_features));
}

size_t CudaBackend::dequant_tile_bytes(const CudaWeight& cw) {
  return static_cast<size_t>(dequant_tile_rows(cw) * cw.in_features) * sizeof(__half);
}

// x → f16 [n][in] in the work buffer (row-scaled where it would overflow), then the GEMM(s), then
// row scales and bias. A quantised weight adds its f16 tile to the work buffer.
void CudaBackend::matmul_gemm(const Tensor& x, const CudaWeight& cw, std::span<const Tensor> outs,
                              std::span<const Weight* const> biases, const PreparedOperand* f16_operand) {
  const int64_t n = x.rows, in = cw.in_features, out = cw.out_features;
  const bool split = outs.size() > 1;
  const float* d_bias = !split && biases[0] ? cuda_vector(*biases[0], "matmul bias").f32() : nullptr;
  // The operand in the work buffer, unless the op before made it.
  const size_t xh_bytes = f16_operand ? 0 : round_up_256(static_cast<size_t>(n * in) * sizeof(__half));
  const size_t unscale_bytes = f16_operand ? 0 : round_up_256(static_cast<size_t>(n) * sizeof(float));
  auto* work = static_cast<uint8_t*>(work_reserve(xh_bytes + unscale_bytes + dequant_tile_bytes(cw)));
  __half* xh = f16_operand ? f16_operand->xh : reinterpret_cast<__half*>(work);
  float* row_unscale = f16_operand ? f16_operand->unscale : reinterpret_cast<float*>(work + xh_bytes);
  auto* tile = reinterpret_cast<__half*>(work + xh_bytes + unscale_bytes);
  if (!f16_operand) convert_rows_f32_to_f16_scaled_cuda(x.as<float>(), xh, row_unscale, n, in, stream_);
  gemm_into(xh, n, cw, outs, tile);
  if (!split) {
    matmul_epilogue_f32_cuda(outs[0].as<float>(), row_unscale, d_bias, n, out, stream_);
  } else {
    for (size_t p = 0; p < outs.size(); ++p) {
      const float* bias = biases[p] ? cuda_vector(*biases[p], "matmul bias").f32() : nullptr;
      matmul_epilogue_f32_cuda(outs[p].as<float>(), row_unscale, bias, n, cw.part_rows[p], stream_);
    }
  }
}

// outs = xh · Wᵀ, no epilogue: one GEMM per part of an f16 matrix, or each part of a quantised one
// dequantised a tile (dequant_tile_rows) at a time into `tile` and multiplied. A stack split into
// its parts' outputs: each part's GEMMs write its output directly (ld = its rows), with no
// [n][out] product copied apart afterwards. f16_products: the products are written in f16, packed
// [n][cols] into the first half of each output's memory (xh scaled for it: f16-product-bound.h).
void CudaBackend::gemm_into(const __half* xh, int64_t n, const CudaWeight& cw, std::span<const Tensor> outs,
                            __half* tile, bool f16_products) {
  const int64_t in = cw.in_features, out = cw.out_features;
  const bool split = outs.size() > 1;
  const cudaDataType y_type = f16_products ? CUDA_R_16F : CUDA_R_32F;
  const size_t y_size = f16_products ? sizeof(__half) : sizeof(float);
  // Where part p (its first output column `first`) goes, and the row stride there: its own output
  // when split, else its columns of the one output.
  const auto part_out = [&](size_t p, int64_t first) -> std::pair<uint8_t*, int64_t> {
    if (split) return {static_cast<uint8_t*>(outs[p].data()), cw.part_rows[p]};
    return {static_cast<uint8_t*>(outs[0].data()) + static_cast<size_t>(first) * y_size, out};
  };
  if (split && cw.has_f16() && cw.part_rows.size() != outs.size())
    fail("internal: CUDA matmul of {}: {} parts into {} outputs", cw.name, cw.part_rows.size(), outs.size());
  if (cw.has_f16()) {  // an f16 matrix, or a quantised one's f16 copy
    if (!split) {
      gemm_f16_rows(cw.f16(), out, in, xh, n, outs[0].data(), y_type, out);
    } else {
      int64_t first = 0;  // the part's first row of the stacked matrix
      for (size_t p = 0; p < outs.size(); ++p) {
        const auto [y, ldy] = part_out(p, first);
        gemm_f16_rows(cw.f16() + first * in, cw.part_rows[p], in, xh, n, y, y_type, ldy);
        first += cw.part_rows[p];
      }
    }
    return;
  }
  if (split && cw.parts().size() != outs.size())
    fail("internal: CUDA matmul of {}: {} quantised parts into {} outputs", cw.name, cw.parts().size(), outs.size());
  const int64_t tile_rows = dequant_tile_rows(cw);
  int64_t first = 0;  // the part's first output column of the whole product
  for (size_t pi = 0; pi < cw.parts().size(); ++pi) {
    const QuantPart& p = cw.parts()[pi];
    const auto [y, ldy] = part_out(pi, first);
    const size_t row_bytes = ggml_row_bytes(p.type, in);
    for (int64_t r0 = 0; r0 < p.rows; r0 += tile_rows) {
      const int64_t nr = std::min(tile_rows, p.rows - r0);
      dequantize_to_f16_cuda(p.type, p.data + static_cast<size_t>(r0) * row_bytes, nr, in, tile, stream_);
      gemm_f16_rows(tile, nr, in, xh, n, y + static_cast<size_t>(r0) * y_size, y_type, ldy);
    }
    first += p.rows;
  }
}

// y[i][j] (row stride ldy) = Σ_k xh[i][k] · W[j][k] for i < n, j < rows: row-major y = xh · Wᵀ is,
// column-major, yᵀ (rows × n, ld ldy) = op(A) · B with A = W seen as an in × rows column-major
// matrix (transposed: CUBLAS_OP_T) and B = xh seen as in × n (CUBLAS_OP_N). f32 accumulation
// (CUBLAS_COMPUTE_32F), tensor cores for the f16 operands; y in f32, or rounded to f16 once at the
// end (y_type CUDA_R_16F).
void CudaBackend::gemm_f16_rows(const __half* w, int64_t rows, int64_t in, const __half* xh, int64_t n, void* y,
                                cudaDataType y_type, int64_t ldy) {
  const float one = 1.f, zero = 0.f;
  CUBLAS_CHECK(cublas::api().gemm_ex(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n), int(in), &one, w,
                                     CUDA_R_16F, int(in), xh, CUDA_R_16F, int(in), &zero, y, y_type, int(ldy),
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

int CudaBackend::int8_operand_block(const CudaWeight& cw, const Weight& w, int64_t n, Activations act) const {
  // matmul_impl's integer GEMV: quantised, a decode product's rows, 8-bit blocks allowed.
  if (!cw.quantised() || n > kQuantGemvMaxRows || act != Activations::block8 || !int8_decode_ || w.wide_activations)
    return 0;
  int block = 0;
  for (const QuantPart& p : cw.parts()) {
    const int b = quant_dot::act_block(p.type);
    if (block && b != block) return 0;  // both sizes: quantised by int8_acts_for
    block = b;
  }
  return block;
}

// A quantised weight times a few rows: each part's GEMV writes its output and adds its bias —
// a stack's parts into their own outputs (outs[p]), or every part into its columns of the one
// output (a plain weight, or a stack multiplied whole). With int8_acts, x is quantised once per
// activation block size the parts read (32 for the legacy types, 256 for the K-quants: the Q4_K_M
// mix needs only the latter) into the work buffer.
CudaBackend::Int8Acts CudaBackend::int8_acts_for(const CudaWeight& cw, int64_t n,
                                                 const std::function<quant_dot::ActQ8(int, void*)>& quantise) {
  const int64_t in = cw.in_features;
  bool need[2] = {false, false};
  for (const QuantPart& p : cw.parts()) need[quant_dot::act_block(p.type) == 256] = true;
  const size_t bytes32 = need[0] ? act_q8_bytes(32, n, in) : 0;
  auto* work = static_cast<uint8_t*>(work_reserve(bytes32 + (need[1] ? act_q8_bytes(256, n, in) : 0)));
  Int8Acts acts;
  if (need[0]) acts[0] = quantise(32, work);
  if (need[1]) acts[1] = quantise(256, work + bytes32);
  return acts;
}

void CudaBackend::matmul_quant_gemv(const Tensor& x, const CudaWeight& cw, std::span<const Tensor> outs,
                                    std::span<const Weight* const> biases, const Int8Acts* acts) {
  const int64_t n = x.rows, in = cw.in_features, out = cw.out_features;
  const auto parts = cw.parts();
  const bool split = outs.size() > 1;
  if (split && parts.size() != outs.size())
    fail("internal: CUDA matmul of {}: {} quantised parts into {} outputs", cw.name, parts.size(), outs.size());
  const float* whole_bias = !split && biases[0] ? cuda_vector(*biases[0], "matmul bias").f32() : nullptr;
  std::vector<int64_t> first(parts.size() + 1, 0);  // each part's first column in the one output
  for (size_t p = 0; p < parts.size(); ++p) first[p + 1] = first[p] + parts[p].rows;
  const auto part_y = [&](size_t p) { return split ? outs[p].as<float>() : outs[0].as<float>() + first[p]; };
  const auto part_ld = [&](size_t p) { return split ? parts[p].rows : out; };
  const auto part_bias = [&](size_t p) -> const float* {
    if (split) return biases[p] ? cuda_vector(*biases[p], "matmul bias").f32() : nullptr;
    return whole_bias ? whole_bias + first[p] : nullptr;
  };
  if (!acts) {
    for (size_t p = 0; p < parts.size(); ++p)
      quant_gemv_cuda(parts[p].type, parts[p].data, parts[p].rows, in, x.as<float>(), n, part_y(p), part_ld(p),
                      part_bias(p), stream_);
    return;
  }
  // Consecutive parts of one type (Q and K of a Q4_K_M file, gate and up) in one launch, and the
  // parts of a second type after them where the pair has a launch (Q4_K_M's Q6_K V parts).
  const auto run_end = [&](size_t from, size_t p0) {
    size_t p = from + 1;
    while (p < parts.size() && p - p0 < size_t(GemvOutputs::kMaxParts) && parts[p].type == parts[from].type) ++p;
    return p;
  };
  for (size_t p0 = 0; p0 < parts.size();) {
    const size_t p1 = run_end(p0, p0);
    const bool pair = p1 < parts.size() && p1 - p0 < size_t(GemvOutputs::kMaxParts) &&
                      int8_gemv_pairs(parts[p0].type, parts[p1].type);
    const size_t p2 = pair ? run_end(p1, p0) : p1;
    GemvOutputs go;
    GemvWeights gw;
    go.parts = int(p2 - p0);
    for (size_t p = p0; p < p2; ++p) {
      const size_t i = p - p0;
      go.first[i + 1] = go.first[i] + parts[p].rows;
      go.y[i] = part_y(p);
      go.ld[i] = part_ld(p);
      go.bias[i] = part_bias(p);
      gw.part[i] = parts[p].data;
    }
    const quant_dot::ActQ8& a = (*acts)[quant_dot::act_block(parts[p0].type) == 256];
    if (pair)
      int8_gemv_pair_cuda(parts[p0].type, parts[p1].type, go.first[p1 - p0], gw, in, a, n, go, stream_);
    else
      int8_gemv_cuda(parts[p0].type, gw, in, a, n, go, stream_);
    p0 = p2;
  }
}

// y [n][out] (device, the whole stack's product) → outs[p] [n][part_rows[p]], plus each bias.
void CudaBackend::matmul_split_outputs(const float* y, const Weight& w, std::span<const Tensor> outs,
                                       std::span<const Weight* const> biases) {
  const int64_t n = outs[0].rows, out = w.out_features;
  int64_t first = 0;
  for (size_t p = 0; p < outs.size(); ++p) {
    const int64_t cols = w.part_rows[p];
    CUDA_CHECK(cudaMemcpy2DAsync(outs[p].data(), size_t(cols) * sizeof(float), y + first,
                                 size_t(out) * sizeof(float), size_t(cols) * sizeof(float), size_t(n),
                                 cudaMemcpyDeviceToDevice, stream_));
    if (biases[p])
      matmul_epilogue_f32_cuda(outs[p].as<float>(), nullptr, cuda_vector(*biases[p], "matmul bias").f32(), n, cols,
                               stream_);
    first += cols;
  }
}

}  // namespace ragkv
