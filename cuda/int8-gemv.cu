// The decode GEMV on 8-bit activation blocks (issue 40, item 3: a decode step reads each weight
// byte once, and should be bound by those bytes, not by decoding them).
//
// quantize_act: one warp per activation block (32 values: a value per lane; 256: eight per lane),
// of x, or of a decode step's GLU computed on the way (the down projection's input, without the
// GLU's own pass): act-quantize.cuh's quantize_act_block, which rms-norm.cu's fused norm shares.
//
// int8_gemv: one warp per output row, four per block of 128 threads, as quant_gemv; one launch may
// cover up to three parts of a stack of one type (QKV, gate/up), each in its own buffer, or of a
// type and then its pair (int8_gemv_pair: Q4_K or Q5_K parts, then Q6_K — the K-quant mixes' V). A weight block
// is read by Lane<T>::kLanes lanes (8 for a K-quant super-block, 1 for a 32-value legacy block),
// so a warp covers 4 super-blocks or 32 legacy blocks per step, consecutive in memory. Each lane
// loads its part of the block once (load) and meets the n ≤ 8 activation rows (dot), adding each
// block's f32 term to a register accumulator per row; butterfly shuffles add the lanes, lane 0
// writes the row (gemv-store.cuh). The integer work per 32 weight values is 8 dp4a plus the
// nibble masks, where the f32 GEMV decodes 32 values and issues 32 FMAs per activation row.
//
// int8_gemv_rope: a layer's Q, K and V in one such launch, stored rotated and into the KV cache
// (gemv-rope-store.cuh) instead of plainly; rows as int8_gemv_pair computes them.
#include <algorithm>
#include <type_traits>

#include "cuda/act-quantize.cuh"
#include "cuda/block-reduce.cuh"
#include "cuda/cuda-check.h"
#include "cuda/gemv-rope-store.cuh"
#include "cuda/gemv-store.cuh"
#include "cuda/glu-activations.cuh"
#include "cuda/int8-gemv.cuh"
#include "cuda/last-block.cuh"

namespace ragkv {

namespace {

namespace qt = quant_dot;

constexpr int kWarps = 4;             // output rows per GEMV block
constexpr int kQuantizeWarps = 8;     // activation blocks per quantize block

size_t round_up_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The values quantised: x[i] as it is, or a decode step's GLU act(gate[i]) · up[i] (elementwise.cu's
// expression, so the values are those the unfused GLU would store).
struct PlainValues {
  const float* x;
  __device__ __forceinline__ float operator()(int64_t i) const { return x[i]; }
};
template <typename Act>
struct GluValues {
  const float* gate;
  const float* up;
  __device__ __forceinline__ float operator()(int64_t i) const { return Act{}(gate[i]) * up[i]; }
};

template <int B, typename Values>
__global__ void quantize_act_kernel(const Values values, int64_t blocks, const ActQ8Out out) {
  constexpr int V = B / 32;  // values per lane
  const int lane = threadIdx.x % 32;
  const int64_t blk = static_cast<int64_t>(blockIdx.x) * kQuantizeWarps + threadIdx.x / 32;
  if (blk >= blocks) return;  // whole warps leave together
  // x and q are [n][cols] with cols a multiple of B: block blk is B consecutive values of both.
  const int64_t first = blk * B + lane * V;
  float v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = values(first + i);
  quantize_act_block<B>(v, lane, blk, out);
}

// Where row o of a launch's parts lies: its part's memory and its row in the part, picked with
// constant indices (as store_gemv_row does).
__device__ __forceinline__ const uint8_t* part_row(const GemvWeights& w, const GemvOutputs& out, int64_t o,
                                                   int64_t& r_in_part) {
  const uint8_t* base = w.part[0];
  r_in_part = o;
#pragma unroll
  for (int p = 1; p < GemvOutputs::kMaxParts; ++p)
    if (p < out.parts && o >= out.first[p]) {
      base = w.part[p];
      r_in_part = o - out.first[p];
    }
  return base;
}

// acc[r] = a[r] · the weight row wr of type T (nb blocks), every lane getting the sums: lane parts
// of the blocks loaded once and met with the N activation rows, then butterfly shuffles. The whole
// warp calls it.
template <GgmlType T, int N>
__device__ __forceinline__ void int8_row(const uint8_t* wr, int64_t nb, const qt::ActQ8& a, int lane, float (&acc)[N]) {
  using L = qt::Lane<T>;
  constexpr int kPerStep = 32 / L::kLanes;  // weight blocks per warp step
  const int part = lane % L::kLanes;
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = 0.f;
#pragma unroll(N <= 2 ? 2 : 1)
  for (int64_t b = lane / L::kLanes; b < nb; b += kPerStep) {
    const typename L::Words wv = L::load(wr + b * L::kBytes, part);
#pragma unroll
    for (int r = 0; r < N; ++r) acc[r] += L::dot(wv, part, a, r, b);
  }
#pragma unroll
  for (int r = 0; r < N; ++r) acc[r] = warp_reduce(acc[r]);
}

template <GgmlType T, int N>
__global__ void int8_gemv_kernel(const GemvWeights w, size_t row_bytes, int64_t rows, int64_t nb, const qt::ActQ8 a,
                                 const GemvOutputs out) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (o >= rows) return;  // whole warps leave together: the shuffles below see all 32 lanes
  int64_t r_in_part = 0;
  const uint8_t* base = part_row(w, out, o, r_in_part);
  float acc[N];
  int8_row<T, N>(base + r_in_part * row_bytes, nb, a, lane, acc);
  if (lane == 0) store_gemv_row<N>(out, o, acc);
}

// Row o of parts of type T0, then of type T1 from row first1 on, as int8_gemv_kernel of its type
// computes it. The whole warp calls it.
template <GgmlType T0, GgmlType T1, int N>
__device__ __forceinline__ void pair_row(const GemvWeights& w, const GemvOutputs& out, int64_t first1, int64_t cols,
                                         int64_t o, const qt::ActQ8& a, int lane, float (&acc)[N]) {
  using L0 = qt::Lane<T0>;
  using L1 = qt::Lane<T1>;
  int64_t r_in_part = 0;
  const uint8_t* base = part_row(w, out, o, r_in_part);
  if (o < first1) {
    const int64_t nb = cols / L0::kElems;
    int8_row<T0, N>(base + r_in_part * nb * L0::kBytes, nb, a, lane, acc);
  } else {
    const int64_t nb = cols / L1::kElems;
    int8_row<T1, N>(base + r_in_part * nb * L1::kBytes, nb, a, lane, acc);
  }
}

// Parts of type T0, then parts of type T1 from row first1 on (Q4_K_M's Q and K, then a Q6_K V):
// each row as int8_gemv_kernel of its type computes it (a warp's rows are of one type), one launch.
template <GgmlType T0, GgmlType T1, int N>
__global__ void int8_gemv_pair_kernel(const GemvWeights w, int64_t first1, int64_t rows, int64_t cols,
                                      const qt::ActQ8 a, const GemvOutputs out) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (o >= rows) return;
  float acc[N];
  pair_row<T0, T1, N>(w, out, first1, cols, o, a, lane, acc);
  if (lane == 0) store_gemv_row<N>(out, o, acc);
}

// A layer's Q, K and V (parts of type T0, then T1 from first1; first1 = rows: one type), stored
// rotated and scattered (gemv-rope-store.cuh).
template <GgmlType T0, GgmlType T1, int N>
__global__ void int8_gemv_rope_kernel(const GemvWeights w, int64_t first1, int64_t rows, int64_t cols,
                                      const qt::ActQ8 a, const GemvOutputs out, const GemvRope rope) {
  gemv_rope_block<N, kWarps>(out, rope, rows, [&](int64_t o, int lane, float(&acc)[N]) {
    pair_row<T0, T1, N>(w, out, first1, cols, o, a, lane, acc);
  });
}

// A decode step's gate/up products, GLU and the down product's operand in one launch: warp j
// computes gate row j and up row j (gate_w, up_w: ff rows each) as int8_gemv_kernel computes
// each, lane 0 stores act(gate) · up (GluValues' expression) into glu [N][ff], and the last of the
// blocks of a chunk of B values (B / kWarps blocks, counted on chunk_done[chunk]: last-block.cuh)
// quantises the chunk's N activation
// blocks with quantize_act_block: int8_gemv_cuda, then quantize_glu_act_q8_cuda's blocks, bit for
// bit, without their launch. ff % B == 0; the counters are left zero.
template <GgmlType T, int N, typename Act, int B>
__global__ void int8_gemv_glu_q8_kernel(const uint8_t* __restrict__ gate_w, const uint8_t* __restrict__ up_w,
                                        size_t row_bytes, int64_t ff, int64_t nb, const qt::ActQ8 a,
                                        float* __restrict__ glu, const ActQ8Out q8, unsigned* __restrict__ chunk_done) {
  static_assert(B % kWarps == 0, "a block's rows in one chunk");
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp;  // < ff: the grid is ff / kWarps blocks
  float gate[N], up[N];
  int8_row<T, N>(gate_w + j * row_bytes, nb, a, lane, gate);
  int8_row<T, N>(up_w + j * row_bytes, nb, a, lane, up);
  if (lane == 0) {
    const Act act;
#pragma unroll
    for (int r = 0; r < N; ++r) glu[r * ff + j] = act(gate[r]) * up[r];
  }
  // Counted once this block's values are visible to every block; the chunk's last one quantises.
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kWarps / B;
  if (!last_block_to_finish(&chunk_done[chunk], B / kWarps)) return;
  constexpr int V = B / 32;
  for (int r = warp; r < N; r += kWarps) {  // whole warps: quantize_act_block's shuffles
    float v[V];
    const float* src = glu + r * ff + chunk * B + lane * V;
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = __ldcg(src + i);  // other blocks' stores: from L2
    quantize_act_block<B>(v, lane, r * (ff / B) + chunk, q8);
  }
}

template <GgmlType T, int N>
void gemv_launch(const GemvWeights& w, int64_t rows, int64_t cols, const qt::ActQ8& a, const GemvOutputs& out,
                 cudaStream_t stream) {
  using L = qt::Lane<T>;
  const int64_t nb = cols / L::kElems;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  int8_gemv_kernel<T, N><<<blocks, kWarps * 32, 0, stream>>>(w, static_cast<size_t>(nb) * L::kBytes, rows, nb, a,
                                                             out);
}

template <GgmlType T>
void gemv_rows(const GemvWeights& w, int64_t rows, int64_t cols, const qt::ActQ8& a, int64_t n,
               const GemvOutputs& out, cudaStream_t stream) {
  with_row_count(n, [&](auto count) { gemv_launch<T, decltype(count)::value>(w, rows, cols, a, out, stream); });
}

template <GgmlType T0, GgmlType T1>
void pair_rows(const GemvWeights& w, int64_t first1, int64_t rows, int64_t cols, const qt::ActQ8& a, int64_t n,
               const GemvOutputs& out, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  with_row_count(n, [&](auto count) {
    int8_gemv_pair_kernel<T0, T1, decltype(count)::value><<<blocks, kWarps * 32, 0, stream>>>(w, first1, rows, cols,
                                                                                              a, out);
  });
}

// The three arrays' byte offsets in the work memory.
struct ActLayout {
  size_t q = 0, d = 0, sums = 0, total = 0;
};

ActLayout act_layout(int block, int64_t n, int64_t cols) {
  ActLayout l;
  const auto values = static_cast<size_t>(n * cols);
  l.d = round_up_256(values);
  l.sums = l.d + round_up_256(values / size_t(block) * sizeof(float));
  l.total = l.sums + round_up_256(block == 32 ? values / 32 * sizeof(float) : values / 16 * sizeof(int16_t));
  return l;
}

}  // namespace

size_t act_q8_bytes(int block, int64_t n, int64_t cols) { return act_layout(block, n, cols).total; }

ActQ8Out act_q8_outputs(int block, int64_t n, int64_t cols, void* work) {
  if ((block != 32 && block != 256) || cols % block != 0)
    cuda_internal_fail("act_q8_outputs: blocks of 32 or 256 values dividing the row");
  const ActLayout l = act_layout(block, n, cols);
  auto* base = static_cast<uint8_t*>(work);
  ActQ8Out o;
  o.q = reinterpret_cast<int8_t*>(base + l.q);
  o.d = reinterpret_cast<float*>(base + l.d);
  if (block == 32)
    o.dsum = reinterpret_cast<float*>(base + l.sums);
  else
    o.bsum = reinterpret_cast<int16_t*>(base + l.sums);
  return o;
}

qt::ActQ8 act_q8_view(const ActQ8Out& o, int64_t cols) {
  qt::ActQ8 a;
  a.q = o.q;
  a.d = o.d;
  a.dsum = o.dsum;
  a.bsum = o.bsum;
  a.cols = cols;
  return a;
}

namespace {

template <typename Values>
qt::ActQ8 quantize_values(const Values& values, int64_t n, int64_t cols, int block, void* work, cudaStream_t stream) {
  const ActQ8Out o = act_q8_outputs(block, n, cols, work);
  const int64_t blocks = n * cols / block;
  if (blocks > 0) {
    const auto grid = static_cast<unsigned>((blocks + kQuantizeWarps - 1) / kQuantizeWarps);
    if (block == 32)
      quantize_act_kernel<32><<<grid, kQuantizeWarps * 32, 0, stream>>>(values, blocks, o);
    else
      quantize_act_kernel<256><<<grid, kQuantizeWarps * 32, 0, stream>>>(values, blocks, o);
    CUDA_CHECK(cudaGetLastError());
  }
  return act_q8_view(o, cols);
}

}  // namespace

qt::ActQ8 quantize_act_q8_cuda(const float* x, int64_t n, int64_t cols, int block, void* work, cudaStream_t stream) {
  return quantize_values(PlainValues{x}, n, cols, block, work, stream);
}

qt::ActQ8 quantize_glu_act_q8_cuda(const float* gate, const float* up, int64_t n, int64_t cols, bool gelu, int block,
                                   void* work, cudaStream_t stream) {
  if (gelu) return quantize_values(GluValues<GeluTanh>{gate, up}, n, cols, block, work, stream);
  return quantize_values(GluValues<Silu>{gate, up}, n, cols, block, work, stream);
}

bool int8_gemv_pairs(GgmlType t0, GgmlType t1) {
  return (t0 == GgmlType::Q4_K || t0 == GgmlType::Q5_K) && t1 == GgmlType::Q6_K;
}

void int8_gemv_pair_cuda(GgmlType t0, GgmlType t1, int64_t first1, const GemvWeights& w, int64_t cols,
                         const qt::ActQ8& a, int64_t n, const GemvOutputs& out, cudaStream_t stream) {
  if (out.parts < 2 || out.parts > GemvOutputs::kMaxParts || out.first[0] != 0 || first1 <= 0 ||
      first1 >= out.first[out.parts])
    cuda_internal_fail("int8_gemv_pair_cuda: the outputs do not split the weight's rows at the second type");
  const int64_t rows = out.first[out.parts];
  if (n == 0) return;
  if (n > kQuantGemvMaxRows) cuda_internal_fail("int8_gemv_pair_cuda: more activation rows than kQuantGemvMaxRows");
  if (a.cols != cols || cols % 256 != 0 || a.bsum == nullptr)
    cuda_internal_fail("int8_gemv_pair_cuda: activation blocks of 256 values over the weight's rows");
  if (t0 == GgmlType::Q4_K && t1 == GgmlType::Q6_K)
    pair_rows<GgmlType::Q4_K, GgmlType::Q6_K>(w, first1, rows, cols, a, n, out, stream);
  else if (t0 == GgmlType::Q5_K && t1 == GgmlType::Q6_K)
    pair_rows<GgmlType::Q5_K, GgmlType::Q6_K>(w, first1, rows, cols, a, n, out, stream);
  else
    cuda_internal_fail("int8_gemv_pair_cuda: a pair of types without a launch of their own");
  CUDA_CHECK(cudaGetLastError());
}

bool int8_gemv_rope_types(GgmlType t0, GgmlType t1) {
  const auto single = [](GgmlType t) {
    return t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0;
  };
  return t0 == t1 ? single(t0) : int8_gemv_pairs(t0, t1);
}

void int8_gemv_rope_cuda(GgmlType t0, GgmlType t1, int64_t first1, const GemvWeights& w, int64_t cols,
                         const qt::ActQ8& a, int64_t n, const GemvOutputs& out, const GemvRope& rope,
                         cudaStream_t stream) {
  const int64_t rows = out.first[out.parts];
  if (!gemv_rope_fits(out, rope, rows, kWarps) || first1 <= 0 || first1 > rows || (t0 == t1) != (first1 == rows))
    cuda_internal_fail("int8_gemv_rope_cuda: not a layer's Q, K and V of whole heads split at the second type");
  if (n == 0) return;
  if (n > kQuantGemvMaxRows) cuda_internal_fail("int8_gemv_rope_cuda: more activation rows than kQuantGemvMaxRows");
  if (a.cols != cols || cols % qt::act_block(t0) != 0 || qt::act_block(t0) != qt::act_block(t1))
    cuda_internal_fail("int8_gemv_rope_cuda: activation blocks of another width than the weight's rows");
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  const auto launch = [&](auto t0c, auto t1c) {
    with_row_count(n, [&](auto count) {
      int8_gemv_rope_kernel<decltype(t0c)::value, decltype(t1c)::value, decltype(count)::value>
          <<<blocks, kWarps * 32, 0, stream>>>(w, first1, rows, cols, a, out, rope);
    });
  };
  using Q4K = std::integral_constant<GgmlType, GgmlType::Q4_K>;
  using Q5K = std::integral_constant<GgmlType, GgmlType::Q5_K>;
  using Q6K = std::integral_constant<GgmlType, GgmlType::Q6_K>;
  using Q80 = std::integral_constant<GgmlType, GgmlType::Q8_0>;
  if (t0 == t1 && t0 == GgmlType::Q4_K) launch(Q4K{}, Q4K{});
  else if (t0 == t1 && t0 == GgmlType::Q5_K) launch(Q5K{}, Q5K{});
  else if (t0 == t1 && t0 == GgmlType::Q6_K) launch(Q6K{}, Q6K{});
  else if (t0 == t1 && t0 == GgmlType::Q8_0) launch(Q80{}, Q80{});
  else if (t0 == GgmlType::Q4_K && t1 == GgmlType::Q6_K) launch(Q4K{}, Q6K{});
  else if (t0 == GgmlType::Q5_K && t1 == GgmlType::Q6_K) launch(Q5K{}, Q6K{});
  else cuda_internal_fail("int8_gemv_rope_cuda: types without a launch of their own");
  CUDA_CHECK(cudaGetLastError());
}

bool int8_gemv_glu_q8_types(GgmlType t, int block) {
  return (t == GgmlType::Q4_K || t == GgmlType::Q5_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0) &&
         block == qt::act_block(t);
}

void int8_gemv_glu_q8_cuda(GgmlType t, const uint8_t* gate_w, const uint8_t* up_w, int64_t ff, int64_t cols,
                           const qt::ActQ8& a, int64_t n, bool gelu, float* glu, int block, const ActQ8Out& q8,
                           unsigned* chunk_done, cudaStream_t stream) {
  if (!int8_gemv_glu_q8_types(t, block) || ff <= 0 || ff % block != 0 || ff / kWarps > INT32_MAX)
    cuda_internal_fail("int8_gemv_glu_q8_cuda: a type without this launch, or an intermediate not of whole blocks");
  if (n == 0) return;
  if (n > kQuantGemvMaxRows) cuda_internal_fail("int8_gemv_glu_q8_cuda: more activation rows than kQuantGemvMaxRows");
  if (a.cols != cols || cols % qt::act_block(t) != 0)
    cuda_internal_fail("int8_gemv_glu_q8_cuda: activation blocks of another width than the weight's rows");
  const auto blocks = static_cast<unsigned>(ff / kWarps);
  const auto launch = [&](auto type, auto act) {
    constexpr GgmlType T = decltype(type)::value;
    using L = qt::Lane<T>;
    const int64_t nb = cols / L::kElems;
    const size_t row_bytes = static_cast<size_t>(nb) * L::kBytes;
    with_row_count(n, [&](auto count) {
      int8_gemv_glu_q8_kernel<T, decltype(count)::value, decltype(act), qt::act_block(T)>
          <<<blocks, kWarps * 32, 0, stream>>>(gate_w, up_w, row_bytes, ff, nb, a, glu, q8, chunk_done);
    });
  };
  const auto with_act = [&](auto type) {
    if (gelu) launch(type, GeluTanh{});
    else launch(type, Silu{});
  };
  if (t == GgmlType::Q4_K) with_act(std::integral_constant<GgmlType, GgmlType::Q4_K>{});
  else if (t == GgmlType::Q5_K) with_act(std::integral_constant<GgmlType, GgmlType::Q5_K>{});
  else if (t == GgmlType::Q6_K) with_act(std::integral_constant<GgmlType, GgmlType::Q6_K>{});
  else with_act(std::integral_constant<GgmlType, GgmlType::Q8_0>{});
  CUDA_CHECK(cudaGetLastError());
}

void int8_gemv_cuda(GgmlType t, const GemvWeights& w, int64_t cols, const qt::ActQ8& a, int64_t n,
                    const GemvOutputs& out, cudaStream_t stream) {
  if (out.parts < 1 || out.parts > GemvOutputs::kMaxParts || out.first[0] != 0)
    cuda_internal_fail("int8_gemv_cuda: the outputs do not split the weight's rows");
  const int64_t rows = out.first[out.parts];
  if (rows == 0 || n == 0) return;
  if (n > kQuantGemvMaxRows) cuda_internal_fail("int8_gemv_cuda: more activation rows than kQuantGemvMaxRows");
  if (a.cols != cols || cols % qt::act_block(t) != 0)
    cuda_internal_fail("int8_gemv_cuda: activation blocks of another width than the weight's rows");
  const bool ok = qt::with_lane(t, [&](auto lane) {
    constexpr GgmlType T = decltype(lane)::kType;
    gemv_rows<T>(w, rows, cols, a, n, out, stream);
  });
  if (!ok) cuda_internal_fail("int8_gemv_cuda: a type without integer lanes");
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace ragkv
