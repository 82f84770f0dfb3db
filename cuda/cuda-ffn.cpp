// The CUDA backend's gated FFN (Backend::glu_ffn): for prefill rows, the two GEMMs around the GLU
// with no f32 round trip between them (issue 40 item 1). xn becomes the f16 operand once; the gate
// and up GEMMs write their raw products into gate and up (f16 by default, below; f32 where the
// weight does not bound them, or under RAGKV_CUDA_FFN_PRODUCTS=f32); glu-f16.cu turns them, in
// one pass, into the down GEMM's f16 operand (the row-scaled GLU values); the down GEMM and its
// row unscale write proj. Unfused, the products went through the gate and up epilogues, the GLU kernel and
// the down GEMM's operand conversion: on an 8B layer of 4,096 rows the last two moved 1.06 GB (gate
// and up read, 235 MB of f32 GLU values written and read again, 117 MB of f16 written), the fused
// kernel 0.59 GB, in one launch instead of four. The values are the unfused ops' bit for bit
// (glu-f16.cuh) under RAGKV_CUDA_FFN_PRODUCTS=f32.
//
// By default the gate and up GEMMs write their products in f16 where the weight's row sums bound
// them (f16-product-bound.h: xn's rows scaled so that no product can pass 2^15), halving the
// widest tensor of the layer once more: 0.47 GB less on that 8B layer (the GEMMs write 235 MB
// instead of 470, the fused kernel reads as much less). The products then carry one more rounding,
// 2^-11 of each; tests/ffn-f16-products-bound.h bounds what it does to the layer's output.
//
// A decode step on a quantised down projection (8-bit activation blocks) computes the GLU while it
// quantises it for that projection (one pass fewer, the same blocks bit for bit); on an f16 gate/up
// stack the GEMV computes each GLU value's gate and up rows in one warp and stores the GLU (one
// launch and the products' f32 round trip fewer, the same values bit for bit). Other calls of up to
// kQuantGemvMaxRows rows, f32 weights, and intermediates wider than kGluF16MaxCols take the unfused
// ops. On a quantised gate/up stack of one type, the gate/up GEMV computes each GLU value's two
// rows in one warp and quantises the GLU for the down projection itself: the last of the blocks of
// an activation block's values quantises it (int8_gemv_glu_q8_cuda; unless
// RAGKV_CUDA_GEMV_STORES=separate), one launch fewer, the same blocks bit for bit.
#include <algorithm>
#include <limits>

#include "core/util/error.h"
#include "cuda/convert.cuh"
#include "cuda/cuda-backend.h"
#include "cuda/cuda-weight.h"
#include "cuda/f16-product-bound.h"
#include "cuda/glu-f16.cuh"
#include "cuda/int8-gemv.cuh"
#include "cuda/quant-matmul.cuh"

namespace ragkv {

namespace {

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

bool gemm_operand(const CudaWeight& cw) { return cw.quantised() || cw.dtype() == DType::f16; }

}  // namespace

void CudaBackend::glu_ffn_impl(const Tensor& xn, const Weight& w_gate_up, const Weight& w_down, const Tensor& gate,
                               const Tensor& up, const Tensor& proj, bool gelu, Activations act) {
  const CudaWeight& cgu = cuda_weight(w_gate_up);
  const CudaWeight& cd = cuda_weight(w_down);
  const int64_t n = xn.rows, in = cgu.in_features, ff = cd.in_features, out = cd.out_features;
  // Operand blocks prepared for the gate/up product (add_rms_norm's hint) are its nested matmul's
  // to take; whatever path runs, none outlives this op (it writes gate, up and proj).
  struct DropPrepared {
    PreparedOperand& p;
    ~DropPrepared() { p = {}; }
  } drop{prepared_};
  if (step_op(StepOp::glu_ffn, {step_key(xn), step_key(w_gate_up), step_key(w_down), step_key(gate),
               step_key(up), step_key(proj), gelu, uint64_t(act)}))
    return;
  const NestedOps nested(op_depth_);  // its products and GLU are part of it
  if (n <= kQuantGemvMaxRows && act == Activations::block8 && int8_decode_ && cd.quantised() &&
      !w_down.wide_activations) {
    const Weight* no_bias[2] = {nullptr, nullptr};
    const int x_block = int8_operand_block(cgu, w_gate_up, n, act), down_block = int8_operand_block(cd, w_down, n, act);
    const auto parts = cgu.parts();
    if (fused_gemv_stores_ && x_block != 0 && parts.size() == 2 && parts[0].type == parts[1].type &&
        parts[0].rows == ff && parts[1].rows == ff && int8_gemv_glu_q8_types(parts[0].type, down_block) &&
        ff % down_block == 0 && size_t(ff / down_block) <= kGluDoneCounters) {
      // A decode step on one quantised type: the gate/up GEMV's blocks each quantise their chunk of
      // the GLU for the down projection as the last of them ends (int8-gemv.cu), one launch.
      const auto timed = profile("matmul/gemv-int8+glu-q8", n);
      ++glu_q8_fused_;
      const PreparedOperand& prepared = prepared_;  // add_rms_norm's blocks of xn, where they are these
      const bool use_prepared = prepared.blocks_for(xn, w_gate_up, x_block);
      const size_t x_bytes = use_prepared ? 0 : act_q8_bytes(x_block, n, in);
      auto* work = static_cast<uint8_t*>(work_reserve(x_bytes + act_q8_bytes(down_block, n, ff)));
      quant_dot::ActQ8 a;
      if (use_prepared) {
        a = prepared.acts;
        ++prepared_used_;
      } else {
        a = quantize_act_q8_cuda(xn.as<float>(), n, in, x_block, work, stream_);
      }
      const quant_dot::ActQ8Out q8 = act_q8_outputs(down_block, n, ff, work + x_bytes);
      int8_gemv_glu_q8_cuda(parts[0].type, parts[0].data, parts[1].data, ff, in, a, n, gelu, gate.as<float>(),
                            down_block, q8, glu_done(), stream_);
      Int8Acts acts;
      acts[down_block == 256] = act_q8_view(q8, ff);
      matmul_quant_gemv(gate, cd, std::span(&proj, 1), std::span(no_bias).first(1), &acts);
      return;
    }
    // A decode step: gate and up as any decode product, then the GLU computed as it is quantised
    // into the down projection's activation blocks (int8-gemv.cu), without a pass of its own.
    const Tensor gate_up[2] = {gate, up};
    matmul_impl(xn, w_gate_up, gate_up, no_bias, act);
    const auto timed = profile("glu+matmul/gemv-int8", n);
    const Int8Acts acts = int8_acts_for(cd, n, [&](int block, void* work) {
      return quantize_glu_act_q8_cuda(gate.as<float>(), up.as<float>(), n, ff, gelu, block, work, stream_);
    });
    matmul_quant_gemv(gate, cd, std::span(&proj, 1), std::span(no_bias).first(1), &acts);
    return;
  }
  if (n <= kQuantGemvMaxRows && cgu.dtype() == DType::f16 && !cgu.quantised() && in % 8 == 0 &&
      cgu.out_features == 2 * ff) {
    // A decode step on an f16 gate/up stack: each GLU value's two rows in one warp of the f16 GEMV
    // and the GLU stored at once (quant-matmul.cu), then the down product.
    {
      const auto timed = profile("matmul/gemv-f16+glu", n);
      f16_gemv_glu_cuda(cgu.f16(), ff, in, xn.as<float>(), n, gelu, gate.as<float>(), stream_);
    }
    const Weight* no_bias[1] = {nullptr};
    matmul_impl(gate, w_down, std::span(&proj, 1), no_bias, act);
    return;
  }
  if (n <= kQuantGemvMaxRows || !gemm_operand(cgu) || !gemm_operand(cd) || ff > kGluF16MaxCols) {
    Backend::glu_ffn_impl(xn, w_gate_up, w_down, gate, up, proj, gelu, act);
    return;
  }
  for (const int64_t v : {n, in, ff, cgu.out_features, out})
    if (v > std::numeric_limits<int>::max()) fail("internal: CUDA glu_ffn: a dimension of {} exceeds cuBLAS's int range", v);
  check_grid_rows(n, "glu_ffn");
  const auto timed = profile("glu_ffn", n);
  const size_t xh_bytes = round_up_256(static_cast<size_t>(n * in) * sizeof(__half));
  const size_t ah_bytes = round_up_256(static_cast<size_t>(n * ff) * sizeof(__half));
  const size_t unscale_bytes = round_up_256(static_cast<size_t>(n) * sizeof(float));
  const size_t tile_bytes = std::max(dequant_tile_bytes(cgu), dequant_tile_bytes(cd));
  auto* work = static_cast<uint8_t*>(work_reserve(xh_bytes + ah_bytes + 2 * unscale_bytes + tile_bytes));
  auto* xh = reinterpret_cast<__half*>(work);
  auto* ah = reinterpret_cast<__half*>(work + xh_bytes);
  auto* x_unscale = reinterpret_cast<float*>(work + xh_bytes + ah_bytes);
  auto* a_unscale = reinterpret_cast<float*>(work + xh_bytes + ah_bytes + unscale_bytes);
  auto* tile = reinterpret_cast<__half*>(work + xh_bytes + ah_bytes + 2 * unscale_bytes);

  // Products in f16 where the weight bounds them (f16_product_top ≥ 0), else in f32.
  const int product_top = f16_ffn_products_ ? f16_product_top(cgu.max_row_l1()) : -1;
  if (prepared_.f16_for(xn, w_gate_up, product_top)) {  // made by the norm before (add_rms_norm's hint)
    xh = prepared_.xh;
    x_unscale = prepared_.unscale;
    ++prepared_used_;
  } else {
    convert_rows_f32_to_f16_scaled_cuda(xn.as<float>(), xh, x_unscale, n, in, stream_, product_top);
  }
  const Tensor gate_up[2] = {gate, up};
  gemm_into(xh, n, cgu, gate_up, tile, product_top >= 0);
  if (product_top >= 0)
    glu_rows_to_f16_cuda(gate.as<__half>(), up.as<__half>(), x_unscale, n, ff, gelu, ah, a_unscale, stream_);
  else
    glu_rows_to_f16_cuda(gate.as<float>(), up.as<float>(), x_unscale, n, ff, gelu, ah, a_unscale, stream_);
  gemm_into(ah, n, cd, std::span(&proj, 1), tile);
  matmul_epilogue_f32_cuda(proj.as<float>(), a_unscale, nullptr, n, out, stream_);
}

}  // namespace ragkv
