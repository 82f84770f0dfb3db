// Kernels over quantised weights kept on the device (issue: "quantised weights stay quantised on
// the device"): decode (quant_gemv), prefill tiles (dequantize_to_f16) and embedding rows.
//
// Every kernel reads the blocks through quant_decode::Block<T>::decode8, eight consecutive
// elements under one scale, whose values equal the CPU backend's dequantize_row bit for bit
// (tests/test-quant-decode.cpp checks the same functions on the host).
//
// quant_gemv: one warp per output row o, four per block of 128 threads. Lane l takes groups of
// eight elements l, l + 32, ... of the row, so a warp's 32 groups are 256 consecutive elements:
// one K-quant super-block, or eight legacy blocks, read together. Each group is decoded once
// and multiplied into the n ≤ 8 activation rows (register accumulators, fmaf in element order);
// the lanes' partial sums are then added by butterfly shuffles and lane 0 writes y (+ bias).
// One read of the weight per call whatever n is: a decode step streams each weight byte once.
//
// f16_gemv: the same kernel over an f16 matrix (groups of eight halves): a decode step reads an
// f16 weight once at f32 activations, instead of cuBLAS's GEMM on f16-rounded, row-scaled rows.
// A stack (QKV, gate/up) is one launch whose lane 0 writes each row into its part's output
// (GemvOutputs), instead of one product copied apart afterwards; a layer's Q, K and V stack may
// store its rows rotated and into the KV cache instead (f16_gemv_rope, gemv-rope-store.cuh).
//
// dequantize_to_f16: one thread per group of eight, grid-stride; __float2half_rn per value, the
// group's eight halves stored at once where the destination is 16-byte aligned.
// embed_quant: one block per id, threads over the row's groups; decoded value × scale.
#include <algorithm>
#include <cstdint>

#include "cuda/cuda-check.h"
#include "cuda/gemv-rope-store.cuh"
#include "cuda/gemv-store.cuh"
#include "cuda/glu-activations.cuh"
#include "cuda/quant-decode.cuh"
#include "cuda/quant-matmul.cuh"

namespace ragkv {

namespace {

namespace qd = quant_decode;

constexpr int kWarps = 4;  // output rows per quant_gemv block
constexpr int kBlock = 256;
constexpr int64_t kMaxBlocks = 65535;

// An f16 matrix read through the same GEMV: "blocks" of eight halves (one 16-byte load), widened
// exactly to f32.
struct F16Group {
  static constexpr int kElems = 8;
  static constexpr int kBytes = 16;
  __device__ __forceinline__ static void decode8(const uint8_t* p, int /*first*/, float* out) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

template <typename B>
__device__ __forceinline__ void decode_group(const uint8_t* row, int64_t k0, float* out) {
  B::decode8(row + (k0 / B::kElems) * B::kBytes, static_cast<int>(k0 % B::kElems), out);
}

template <typename B>
size_t row_bytes_of(int64_t cols) {
  return static_cast<size_t>(cols / B::kElems) * B::kBytes;
}

// acc[r] = x[r] · row for r < N (every lane gets the sums): lane l takes groups of eight elements
// l, l + 32, … of the row, each decoded once and multiplied into the N activation rows (fmaf in
// element order), then the lanes' partial sums are added by butterfly shuffles. The whole warp
// must call it.
template <typename B, int N>
__device__ __forceinline__ void gemv_row(const uint8_t* __restrict__ wr, int64_t cols, const float* __restrict__ x,
                                         int lane, float (&acc)[N]) {
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = 0.f;
  // For one or two rows (decode), unrolled so that a lane has several 16-byte weight loads in
  // flight (the accumulation order of each acc[r] is the loop's, unchanged); for more rows the
  // registers would cost occupancy (K-quants: 131-153 registers at 4-8 rows, against 40).
  // x's eight values of a group in two 16-byte loads where x is 16-byte aligned (always, for the
  // backend's tensors: rows of whole groups from 256-byte aligned allocations), else one by one.
  const bool x_vector = reinterpret_cast<uintptr_t>(x) % 16 == 0;
#pragma unroll(N <= 2 ? 4 : 1)
  for (int64_t k0 = int64_t(lane) * 8; k0 < cols; k0 += 32 * 8) {
    float wv[8];
    decode_group<B>(wr, k0, wv);
#pragma unroll
    for (int r = 0; r < N; ++r) {
      const float* xr = x + r * cols + k0;
      float xv[8];
      if (x_vector) {
        const float4 lo = __ldg(reinterpret_cast<const float4*>(xr)), hi = __ldg(reinterpret_cast<const float4*>(xr + 4));
        xv[0] = lo.x, xv[1] = lo.y, xv[2] = lo.z, xv[3] = lo.w, xv[4] = hi.x, xv[5] = hi.y, xv[6] = hi.z, xv[7] = hi.w;
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[i] = __ldg(xr + i);
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r] = fmaf(xv[i], wv[i], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < N; ++r) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], offset);
  }
}

template <typename B, int N>
__global__ void quant_gemv_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                                  const float* __restrict__ x, const GemvOutputs out) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (o >= rows) return;  // whole warps leave together: the shuffles below see all 32 lanes
  float acc[N];
  gemv_row<B, N>(w + o * row_bytes, cols, x, lane, acc);
  if (lane == 0) store_gemv_row<N>(out, o, acc);
}

// A decode step's gate/up products and GLU on an f16 stack [2 ff][cols] (gate rows, then up rows):
// warp j computes gate row j and up row ff + j as quant_gemv_kernel computes each row, and lane 0
// stores act(gate) · up (elementwise.cu's expression) — the values the GEMV, then the GLU kernel
// store, bit for bit, without the products' f32 round trip or the GLU's launch.
template <int N, typename Act>
__global__ void f16_gemv_glu_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t ff, int64_t cols,
                                    const float* __restrict__ x, float* __restrict__ out) {
  const int lane = threadIdx.x % 32;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (j >= ff) return;  // whole warps leave together
  float gate[N], up[N];
  gemv_row<F16Group, N>(w + j * row_bytes, cols, x, lane, gate);
  gemv_row<F16Group, N>(w + (ff + j) * row_bytes, cols, x, lane, up);
  if (lane == 0) {
    const Act act;
#pragma unroll
    for (int r = 0; r < N; ++r) out[r * ff + j] = act(gate[r]) * up[r];
  }
}

// f16_gemv's rows of a layer's Q, K and V, stored rotated and scattered (gemv-rope-store.cuh).
template <int N>
__global__ void f16_gemv_rope_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows, int64_t cols,
                                     const float* __restrict__ x, const GemvOutputs out, const GemvRope rope) {
  gemv_rope_block<N, kWarps>(out, rope, rows, [&](int64_t o, int lane, float(&acc)[N]) {
    gemv_row<F16Group, N>(w + o * row_bytes, cols, x, lane, acc);
  });
}

// kVector: dst is 16-byte aligned, so a group's eight halves go out in one 16-byte store (the
// prefill tiles' case) instead of eight 2-byte ones; the same values either way.
template <typename B, bool kVector>
__global__ void dequantize_to_f16_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t rows,
                                         int64_t cols, __half* __restrict__ dst) {
  const int64_t groups_per_row = cols / 8, groups = rows * groups_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const int64_t r = g / groups_per_row, k0 = (g % groups_per_row) * 8;
    float v[8];
    decode_group<B>(w + r * row_bytes, k0, v);
    __half* d = dst + r * cols + k0;
    if constexpr (kVector) {
      uint4 packed;
      uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const __half2 h = __floats2half2_rn(v[2 * i], v[2 * i + 1]);  // each rounded as __float2half_rn
        words[i] = *reinterpret_cast<const uint32_t*>(&h);
      }
      *reinterpret_cast<uint4*>(d) = packed;
    } else {
#pragma unroll
      for (int i = 0; i < 8; ++i) d[i] = __float2half_rn(v[i]);
    }
  }
}

template <typename B>
__global__ void embed_quant_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t cols,
                                   const int32_t* __restrict__ ids, float* __restrict__ out, float scale) {
  const int64_t i = blockIdx.x;
  const uint8_t* row = w + static_cast<int64_t>(ids[i]) * row_bytes;
  float* dst = out + i * cols;
  for (int64_t k0 = int64_t(threadIdx.x) * 8; k0 < cols; k0 += int64_t(blockDim.x) * 8) {
    float v[8];
    decode_group<B>(row, k0, v);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[k0 + j] = v[j] * scale;
  }
}

template <typename B, int N>
void gemv_launch(const uint8_t* w, int64_t rows, int64_t cols, const float* x, const GemvOutputs& out,
                 cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  quant_gemv_kernel<B, N><<<blocks, kWarps * 32, 0, stream>>>(w, row_bytes_of<B>(cols), rows, cols, x, out);
}

// The kernel for n activation rows (1 ≤ n ≤ kQuantGemvMaxRows: N is a template argument).
template <typename B>
void gemv_rows(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n, const GemvOutputs& out,
               cudaStream_t stream) {
  with_row_count(n, [&](auto count) { gemv_launch<B, decltype(count)::value>(w, rows, cols, x, out, stream); });
}

GemvOutputs one_output(int64_t rows, float* y, int64_t y_ld, const float* bias) {
  GemvOutputs out;
  out.parts = 1;
  out.first[1] = rows;
  out.y[0] = y;
  out.ld[0] = y_ld;
  out.bias[0] = bias;
  return out;
}

}  // namespace

void dequantize_to_f16_cuda(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, __half* dst,
                            cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const bool ok = qd::with_block(t, [&](auto block) {
    using B = decltype(block);
    const int64_t groups = rows * (cols / 8);
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((groups + kBlock - 1) / kBlock, kMaxBlocks));
    if (reinterpret_cast<uintptr_t>(dst) % 16 == 0)  // cols is a multiple of 8: every group aligned
      dequantize_to_f16_kernel<B, true><<<blocks, kBlock, 0, stream>>>(w, row_bytes_of<B>(cols), rows, cols, dst);
    else
      dequantize_to_f16_kernel<B, false><<<blocks, kBlock, 0, stream>>>(w, row_bytes_of<B>(cols), rows, cols, dst);
  });
  if (!ok) cuda_internal_fail("dequantize_to_f16_cuda: a type the device does not decode");
  CUDA_CHECK(cudaGetLastError());
}

void quant_gemv_cuda(GgmlType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                     float* y, int64_t y_ld, const float* bias, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (n > kQuantGemvMaxRows) cuda_internal_fail("quant_gemv_cuda: more activation rows than kQuantGemvMaxRows");
  const GemvOutputs out = one_output(rows, y, y_ld, bias);
  const bool ok =
      qd::with_block(t, [&](auto block) { gemv_rows<decltype(block)>(w, rows, cols, x, n, out, stream); });
  if (!ok) cuda_internal_fail("quant_gemv_cuda: a type the device does not decode");
  CUDA_CHECK(cudaGetLastError());
}

void f16_gemv_cuda(const __half* w, int64_t rows, int64_t cols, const float* x, int64_t n, float* y, int64_t y_ld,
                   const float* bias, cudaStream_t stream) {
  f16_gemv_parts_cuda(w, rows, cols, x, n, one_output(rows, y, y_ld, bias), stream);
}

void f16_gemv_parts_cuda(const __half* w, int64_t rows, int64_t cols, const float* x, int64_t n,
                         const GemvOutputs& out, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (n > kQuantGemvMaxRows || cols % 8 != 0)
    cuda_internal_fail(
        "f16_gemv_cuda: more activation rows than kQuantGemvMaxRows, or a row not of whole 8-value groups");
  if (out.parts < 1 || out.parts > GemvOutputs::kMaxParts || out.first[0] != 0 || out.first[out.parts] != rows)
    cuda_internal_fail("f16_gemv_parts_cuda: the outputs do not split the matrix's rows");
  gemv_rows<F16Group>(reinterpret_cast<const uint8_t*>(w), rows, cols, x, n, out, stream);
  CUDA_CHECK(cudaGetLastError());
}

void f16_gemv_rope_cuda(const __half* w, int64_t rows, int64_t cols, const float* x, int64_t n, const GemvOutputs& out,
                        const GemvRope& rope, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  if (n > kQuantGemvMaxRows || cols % 8 != 0)
    cuda_internal_fail("f16_gemv_rope_cuda: more activation rows than kQuantGemvMaxRows, or a row not of whole groups");
  if (!gemv_rope_fits(out, rope, rows, kWarps))
    cuda_internal_fail("f16_gemv_rope_cuda: not a layer's Q, K and V of whole heads");
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  with_row_count(n, [&](auto count) {
    f16_gemv_rope_kernel<decltype(count)::value><<<blocks, kWarps * 32, 0, stream>>>(
        reinterpret_cast<const uint8_t*>(w), row_bytes_of<F16Group>(cols), rows, cols, x, out, rope);
  });
  CUDA_CHECK(cudaGetLastError());
}

void f16_gemv_glu_cuda(const __half* w_gate_up, int64_t ff, int64_t cols, const float* x, int64_t n, bool gelu,
                       float* out, cudaStream_t stream) {
  if (ff == 0 || n == 0) return;
  if (n > kQuantGemvMaxRows || cols % 8 != 0)
    cuda_internal_fail("f16_gemv_glu_cuda: more activation rows than kQuantGemvMaxRows, or a row not of whole groups");
  const auto* w = reinterpret_cast<const uint8_t*>(w_gate_up);
  const size_t row_bytes = row_bytes_of<F16Group>(cols);
  const auto blocks = static_cast<unsigned>((ff + kWarps - 1) / kWarps);
  with_row_count(n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    if (gelu)
      f16_gemv_glu_kernel<N, GeluTanh><<<blocks, kWarps * 32, 0, stream>>>(w, row_bytes, ff, cols, x, out);
    else
      f16_gemv_glu_kernel<N, Silu><<<blocks, kWarps * 32, 0, stream>>>(w, row_bytes, ff, cols, x, out);
  });
  CUDA_CHECK(cudaGetLastError());
}

void embed_quant_cuda(GgmlType t, const uint8_t* w, int64_t cols, const int32_t* ids, int64_t n, float* out,
                      float scale, cudaStream_t stream) {
  if (n == 0 || cols == 0) return;
  const bool ok = qd::with_block(t, [&](auto block) {
    using B = decltype(block);
    embed_quant_kernel<B><<<static_cast<unsigned>(n), kBlock, 0, stream>>>(w, row_bytes_of<B>(cols), cols, ids,
                                                                            out, scale);
  });
  if (!ok) cuda_internal_fail("embed_quant_cuda: a type the device does not decode");
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
