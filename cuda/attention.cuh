// Fused attention launcher (attention.cu): FlashAttention-style tiles with an online softmax,
// masking by absolute positions, for the selective-recompute fusor (DESIGN.md §4).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quant-dot.cuh"

namespace ragkv {

// One attention call on device memory; the semantics are those of Backend::attention
// (core/backend/backend.h) and its CPU reference (core/backend/cpu-backend.cpp).
struct AttentionArgs {
  const float* q = nullptr;        // device f32 [n_q][n_head * head_dim], contiguous rows
  const int32_t* q_pos = nullptr;  // device [n_q] absolute positions (unused when !causal)
  const void* k = nullptr;         // device f16 (kv_f16) or f32 [>= n_kv][n_kv_head * head_dim]
  const void* v = nullptr;         // same layout and dtype as k
  bool kv_f16 = true;
  const int32_t* k_pos = nullptr;  // device [n_kv] absolute positions of the key rows, any order
                                   // (cached and recomputed rows interleave; unused when !causal)
  // device [⌈n_kv / kKeyTileKeys⌉][2]: min and max of k_pos per tile of 32 key rows
  // (key-tile-bounds.h); causal calls on the tensor-core kernel need it.
  const int32_t* k_tile_bounds = nullptr;
  int64_t n_q = 0, n_kv = 0;
  int n_head = 0, n_kv_head = 0, head_dim = 0;  // head_dim 32, 64, 128 or 256
  float scale = 0.f, softcap = 0.f;  // softcap > 0: logits = softcap * tanh(logits / softcap)
  int sliding_window = 0;            // > 0: a query at p sees keys at positions in (p - window, p]
  bool causal = true;                // false: every query sees all n_kv keys, positions unused
  float* out = nullptr;              // device f32 [n_q][n_head * head_dim]
  // Optional (Cache-Craft inter/intra attention): when seg_mass != nullptr,
  // seg_mass[(i * n_head + h) * n_seg + s] = sum of query i / head h's softmax probabilities over
  // key rows [seg_begin[s], seg_begin[s + 1]) (boundaries ascending, as in SegmentMass; rows
  // outside [0, n_kv) count for nothing).
  const int64_t* seg_begin = nullptr;  // device [n_seg + 1]
  int n_seg = 0;
  float* seg_mass = nullptr;           // device f32 [n_q][n_head][n_seg]
  // Optional, instead of seg_mass (SegmentMass::key_totals): key_mass[j] = sum over every query
  // and head of their softmax probability of key row j.
  float* key_mass = nullptr;           // device f32 [n_kv]
  // false: the f32 kernel even where the tensor-core one applies (attention-mma.cuh), for tests
  // held to the f32 tolerance.
  bool tensor_cores = true;
  // Optional device workspace for the split-K path's partial sums (attention_decode_work_bytes);
  // without one (or too small) it allocates its own on the stream. A decode step captured as a
  // CUDA graph passes one, so that the graph holds no allocation nodes.
  void* decode_work = nullptr;
  size_t decode_work_bytes = 0;
  // Optional device workspace for the tensor-core kernel's key ranges when it splits the keys
  // (attention_mma_work_bytes; 0 when it does not), as decode_work.
  void* mma_work = nullptr;
  size_t mma_work_bytes = 0;
  // > 0: the tensor-core kernel splits the keys into this many ranges (at most one per key tile —
  // 64 keys, 32 at head_dim 256 — and kMaxKeySplits), for tests; 0: it decides from the shapes
  // and the GPU.
  int key_splits = 0;
  // Key totals from the query rows [key_mass_first_row, n_q) only (SegmentMass::first_query); out
  // is still every row's attention.
  int64_t key_mass_first_row = 0;
  // Optional device workspace for key totals or segment mass on tensor cores
  // (attention_key_mass_work_bytes, attention_segment_mass_work_bytes), as decode_work: without
  // one (or too small) those paths allocate their own on the stream.
  void* mass_work = nullptr;
  size_t mass_work_bytes = 0;
  // Optional, split-K route only (a decode step replayed as a CUDA graph, cuda-step-graph.cpp):
  // the number of keys read from device memory when the kernel runs; n_kv is then only an upper
  // bound on it (the grid covers n_kv keys, ranges past the device count are empty and add exact
  // zeros), and k_pos must hold n_kv entries (those past the device count unread).
  const int32_t* n_kv_device = nullptr;
  // Optional, split-K route only (q8_block 32 or 256, dividing n_head · head_dim): out's rows also
  // quantised into the 8-bit activation blocks of the decode product that reads them next
  // (act-quantize.cuh: the blocks int8-gemv.cu's quantize_act would make of out), [n_q] rows.
  quant_dot::ActQ8Out q8;
  int q8_block = 0;
  // Split-K: n_kv_head counters (at least), zero, for the partial kernel's blocks to find the last
  // of their head (which combines the ranges; the counters are left zero). Without them the launch
  // allocates and zeroes its own on the stream, as decode_work.
  unsigned* decode_done = nullptr;
  // Split-K: the ranges combined by a kernel of their own (the path before the last block did it),
  // for tests.
  bool separate_combine = false;
};

// The kernel attention_cuda runs a checked call on: split-K (attention-decode.cu) for a few query
// vectors per KV head without mass (any number of keys; not under RAGKV_CUDA_ATTENTION=f32); the tensor-core kernel (attention-mma.cu) for
// f16 K/V, followed by the key-total pass (attention-key-mass.cu) or the segment-mass pass
// (attention-segment-mass.cu) when either is wanted; else the f32 kernel of attention.cu, with or
// without segment mass / key totals.
enum class AttentionRoute { split_k, mma, mma_key_mass, mma_segment_mass, f32, f32_mass };
AttentionRoute attention_route(const AttentionArgs& a);

// Queues the attention on `stream`. q, k, v and out must be 16-byte aligned (row slices of
// cudaMalloc'd tensors are); out must not overlap q, k, v or seg_mass. Rows [0, n_kv) of k and v
// must hold finite values (a masked key still meets a zero probability in P·V). A query that
// sees no key gets output 0 and segment mass 0, as on the CPU. Throws ragkv::Error on bad
// arguments (unsupported head_dim, n_head not a multiple of n_kv_head, a sliding window without
// causal masking, missing or misaligned pointers) or a failed launch.
void attention_cuda(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ragkv
