// Token embedding lookup: out row i = table row ids[i] · scale, widened to f32.
//
// A pure gather, memory-bound: blocks over (output row, chunk of kChunk columns), each thread
// copying every blockDim-th column of its chunk, so consecutive threads touch consecutive
// elements of one table row (coalesced reads and writes). Table rows are indexed in int64
// (vocab · dim exceeds 2^31 for large vocabularies). The ids were range-checked on the host
// before the launch; nothing here reads outside the table for valid ids.
//
// Numerics: an f16 table widens exactly, and the one f32 multiply by scale is the CPU backend's
// (core/backend/cpu-backend.cpp multiplies its f32 copy of the table the same way). The only difference
// from the CPU is therefore the f16 storage of the table itself (load_weight, cuda-backend.cpp):
// for a table whose values are f16-exact the results are bit-identical.
#include <algorithm>

#include "cuda/cuda-check.h"
#include "cuda/embed.cuh"

namespace ragkv {

namespace {

constexpr int kBlock = 256;
constexpr int64_t kChunk = 1024;  // columns per block
constexpr int64_t kMaxChunkBlocks = 65535;  // gridDim.y limit

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

template <typename T>
__global__ void embed_kernel(const T* __restrict__ table, const int32_t* __restrict__ ids,
                             float* __restrict__ out, int64_t dim, float scale) {
  const int64_t i = blockIdx.x;
  const T* src = table + static_cast<int64_t>(ids[i]) * dim;
  float* dst = out + i * dim;
  const int64_t n_chunks = (dim + kChunk - 1) / kChunk;
  for (int64_t chunk = blockIdx.y; chunk < n_chunks; chunk += gridDim.y) {
    const int64_t end = (chunk + 1) * kChunk < dim ? (chunk + 1) * kChunk : dim;
    for (int64_t j = chunk * kChunk + threadIdx.x; j < end; j += blockDim.x)
      dst[j] = to_f32(src[j]) * scale;
  }
}

template <typename T>
void embed_launch(const T* table, const int32_t* ids, float* out, int64_t n, int64_t dim,
                  float scale, cudaStream_t stream) {
  if (n == 0 || dim == 0) return;
  const int64_t n_chunks = (dim + kChunk - 1) / kChunk;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(std::min(n_chunks, kMaxChunkBlocks)));
  embed_kernel<T><<<grid, kBlock, 0, stream>>>(table, ids, out, dim, scale);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void embed_f16_cuda(const __half* table, const int32_t* ids, float* out, int64_t n, int64_t dim,
                    float scale, cudaStream_t stream) {
  embed_launch(table, ids, out, n, dim, scale, stream);
}

void embed_f32_cuda(const float* table, const int32_t* ids, float* out, int64_t n, int64_t dim,
                    float scale, cudaStream_t stream) {
  embed_launch(table, ids, out, n, dim, scale, stream);
}

}  // namespace ragkv
