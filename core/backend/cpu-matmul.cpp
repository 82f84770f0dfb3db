// CpuMatmul: y = x · Wᵀ on weights kept in their GGUF types. The activation rows are quantised in
// the formats the weight's parts need (ActBlock32 for Q4_0 … Q8_0, ActBlock256 for the K-quants,
// none for F16/BF16), then the weight rows are cut into tiles the threads share; each tile meets
// every activation row (the kernels hold up to four rows in registers per weight row, so a tile
// of weight rows read once serves the whole batch: decode steps of many sequences read each
// weight once). Every output depends only on its row of x and its row of W (quant-kernels.h).
// That is Activations::block8 (decode steps). Prompts on K-quant weights, where the CPU has
// AVX-512 VNNI, take the prompt kernels (16-bit activation blocks against weights repacked per
// call, quant-kernels.h); Q4_K parts repacked at load (CpuWeightPart::rows16) meet the kernels
// for that layout in both. Otherwise, with wide activations (prompts, and weights marked
// wide_activations such as the output head) quantised parts are dequantised tile by tile into
// SGEMM, except in calls of fewer than kDequantGemmRows rows: on Q8_0/F16/BF16/F32 parts only
// they run kernels on 16-bit activation blocks (Q8_0) or f32 activations (F16/BF16); with other
// parts, calls of under kDequantRowsCalls rows meet a few dequantised weight rows at a time in
// an f32 row kernel.
#include "core/backend/cpu-matmul.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/backend/cpu-gemm.h"
#include "core/backend/quant-kernels.h"

namespace ragkv {

namespace {

struct Tile {
  size_t part;
  int64_t row0, rows;  // weight rows [row0, row0 + rows) of the part
};

// Where part p's products go: its columns of the single output, or its own output.
struct PartOutput {
  float* y;
  int64_t ldy;
};
PartOutput part_output(const CpuWeight& w, std::span<const Tensor> outs, size_t p) {
  if (outs.size() == 1) return {outs[0].as<float>() + w.parts[p].first_row, outs[0].cols};
  return {outs[p].as<float>(), outs[p].cols};
}

// Weight rows per tile of a decode step's product (few activation rows): each thread's share of the
// part cut into equal tiles of at least kDecodeTileBytes, in multiples of 16 rows (the Q4KRows16
// groups). Long runs of consecutive bytes let the hardware prefetcher reach the memory's bandwidth
// (a test program, 2 threads streaming a buffer: 16 KiB runs 27.5 GB/s, 64 KiB 35, 1 MiB 36.4);
// tiles of 64 rows were 150–530 KiB on the 8B-shaped model. Equal tiles, a whole number per
// thread, keep the threads' shares even.
constexpr int64_t kDecodeTileBytes = int64_t(1) << 20;
int64_t decode_tile_rows(int64_t rows, size_t row_bytes, int threads) {
  const int64_t t = std::max(1, threads);
  const int64_t per_thread = std::max<int64_t>(1, rows * int64_t(row_bytes) / (t * kDecodeTileBytes));
  const int64_t tiles = t * per_thread;
  return std::max<int64_t>(16, ((rows + tiles - 1) / tiles + 15) / 16 * 16);
}

// Where a tile's weight rows start for its kernel, and the stride its kernel steps by: the part's
// Q4KRows16 groups where it has them (tiles start at multiples of 16 rows), else the file's rows.
struct TileRows {
  const uint8_t* w;
  size_t stride;
};
TileRows tile_rows(const CpuWeightPart& part, const Tile& tl, int64_t k) {
  if (part.rows16) {
    const size_t group = q4_k_rows16()->group_bytes(k);
    return {part.rows16 + size_t(tl.row0 / 16) * group, group};
  }
  return {part.data + tl.row0 * part.row_bytes, part.row_bytes};
}

// A tile's weight rows as f32, k values each, k apart: an F32 part's own rows, else the rows
// dequantised into the thread's buffer wf (grown as needed, kept between calls).
const float* tile_as_f32(const QuantKernels& qk, const CpuWeightPart& part, const Tile& tl, int64_t k,
                         std::vector<float>& wf) {
  if (part.type == GgmlType::F32) return reinterpret_cast<const float*>(part.data + tl.row0 * part.row_bytes);
  if (wf.size() < size_t(tl.rows * k)) wf.resize(size_t(tl.rows * k));
  for (int64_t r = 0; r < tl.rows; ++r)
    dequantize_row_with(qk, part.type, part.data + (tl.row0 + r) * part.row_bytes, wf.data() + r * k, k);
  return wf.data();
}

// Below this many multiply-adds a call runs on the calling thread (waking the pool costs more).
constexpr int64_t kParallelMacs = 1 << 18;

// With wide activations, from this many rows (a prompt) a quantised part is dequantised tile by
// tile into f32 and multiplied by SGEMM: measured faster for 512-token prefills than the integer
// block kernels (bench/results/README.md), and the weights still stay quantised in memory (a tile
// per thread at a time). Fewer rows on types with wide-activation kernels use those.
constexpr int64_t kDequantGemmRows = 32;

// Calls of fewer activation rows than this (decode steps' heads on types without wide kernels)
// take run_dequant_rows; from 8 rows on SGEMM on dequantised tiles was as fast or faster (16 rows:
// 50 against 56 ms for a SmolLM2 prefill, 31 rows 79 against 99 ms; bench/results/README.md,
// "CPU speed and memory against llama.cpp").
constexpr int64_t kDequantRowsCalls = 8;

// Rows of a tile of run_dequant_rows: as many as keep its f32 values within kDequantRowsBytes,
// in L2 while the activation rows pass over it, and between kDequantRowsMin and kDequantRowsMax.
constexpr int64_t kDequantRowsBytes = int64_t(128) << 10;
constexpr int64_t kDequantRowsMin = 4;
constexpr int64_t kDequantRowsMax = 64;

// Rows of a dequantised tile: each SGEMM call packs all the activation rows again, so a tile is
// as large as a thread's share of the part, up to kDequantTileBytes of f32 (and at least
// kDequantTileMin rows). 64-row tiles spent 10 % of a Gemma 3 prefill repacking the prompt
// (bench/results/README.md, 2026-11-25).
constexpr int64_t kDequantTileMin = 64;
constexpr int64_t kDequantTileBytes = int64_t(4) << 20;
int64_t dequant_tile_rows(int64_t part_rows, int64_t k, int threads) {
  const int64_t t = std::max(1, threads);
  const int64_t share = (part_rows + t - 1) / t;
  const int64_t cap = std::max(kDequantTileMin, kDequantTileBytes / (k * int64_t(sizeof(float))));
  return std::max(kDequantTileMin, std::min(share, cap));
}

// RAGKV_PREFILL_KERNELS=quant in the environment lets every product round its activations to 8
// bits (the block kernels for prompts too), except weights marked wide_activations: for comparisons.
bool block8_everywhere() {
  static const bool on = [] {
    const char* v = std::getenv("RAGKV_PREFILL_KERNELS");
    return v && std::strcmp(v, "quant") == 0;
  }();
  return on;
}

}  // namespace

void CpuMatmul::run(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs,
                    std::span<const Weight* const> biases, int threads, Activations act) {
  const int64_t m = x.rows, k = x.cols;
  if (m == 0) return;
  // Wide activations: Q8_0 has kernels on 16-bit blocks (F16/BF16 always meet f32), any other
  // quantised part, and every call of a prompt's size, takes the dequantised tiles.
  const bool wide = w.wide_activations || (act == Activations::f32 && !block8_everywhere());
  bool wide_kernels = true, all_f32 = true;
  for (const CpuWeightPart& part : w.parts) {
    wide_kernels &= act_format(part.type) == ActFormat::f32 || part.type == GgmlType::Q8_0;
    all_f32 &= part.type == GgmlType::F32;
  }
  // A prompt on K-quant weights, where the CPU has the prompt kernels: integer products on 16-bit
  // activation blocks (or 8-bit ones, RAGKV_PREFILL_KERNELS=int8), for calls of any row count —
  // faster than the f32 paths from one row on (8B-shaped Q4_K_M, 2 threads: 1.16 → 1.46 tokens/s
  // for a 1-token prompt, 2.8 → 8.3 for 8 tokens, 5.7 → 14.7 for 24), and a row's result is then
  // the same whatever the call's row count (full's rows and blend's recomputed ones alike).
  if (wide && !w.wide_activations) {
    if (const PromptKernels* pk = prompt_kernels()) {
      bool all_k = true;
      for (const CpuWeightPart& part : w.parts) all_k &= prompt_gemm_for(*pk, part.type) != nullptr;
      if (all_k) {
        run_prompt_kernels(x, w, outs, threads, *pk);
        add_biases(outs, biases);
        return;
      }
    }
  }
  if (wide && !all_f32 && (m >= kDequantGemmRows || !wide_kernels)) {
    // Like the Q8_0 kernel, the Q6_K one serves every call under kDequantGemmRows rows, so a row's
    // result is the same in any decode batch of up to 31 sequences.
    if (m < kDequantGemmRows && run_q6_k_wide(x, w, outs, threads)) {
      add_biases(outs, biases);
      return;
    }
    if (m < kDequantRowsCalls) run_dequant_rows(x, w, outs, threads);
    else run_dequant_gemm(x, w, outs, threads);
    add_biases(outs, biases);
    return;
  }

  const auto format_of = [wide](GgmlType t) { return wide ? wide_act_format(t) : act_format(t); };
  bool need32 = false, need256 = false, need16 = false;
  std::vector<Tile> tiles;
  int64_t quant_rows = 0;
  for (size_t p = 0; p < w.parts.size(); ++p) {
    const CpuWeightPart& part = w.parts[p];
    if (part.type == GgmlType::F32) {  // SGEMM on the f32 rows as they are
      const auto [y, ldy] = part_output(w, outs, p);
      gemm_nt(m, part.rows, k, x.as<float>(), x.cols, reinterpret_cast<const float*>(part.data), k, y, ldy, 1.f,
              /*rows_independent=*/true);
      continue;
    }
    const ActFormat f = format_of(part.type);
    need32 |= f == ActFormat::q8_32;
    need256 |= f == ActFormat::q8_256;
    need16 |= f == ActFormat::q16_32;
    quant_rows += part.rows;
    // Tiles of weight rows: few activation rows (decode) make a tile cheap, so larger tiles; a
    // prompt's rows make each tile long, so smaller tiles spread the threads evenly.
    const int64_t tile = m <= 8 ? decode_tile_rows(part.rows, part.row_bytes, threads) : 16;
    for (int64_t r0 = 0; r0 < part.rows; r0 += tile) tiles.push_back({p, r0, std::min(tile, part.rows - r0)});
  }

  if (!tiles.empty()) {
    const QuantKernels& qk = quant_kernels();
    // Q4_K at decode in 512-bit vectors where the CPU has AVX-512 VNNI (not with the portable
    // table or the f32 comparisons forced: prompt_kernels() is null then).
    const GemmFn q4_k_vnni = prompt_kernels() ? gemm_q4_k_decode_vnni() : nullptr;
    const size_t b32 = act_row_bytes(ActFormat::q8_32, k), b256 = act_row_bytes(ActFormat::q8_256, k),
                 b16 = act_row_bytes(ActFormat::q16_32, k);
    if (need32 && act32_.size() < size_t(m) * b32) act32_.resize(size_t(m) * b32);
    if (need256 && act256_.size() < size_t(m) * b256) act256_.resize(size_t(m) * b256);
    if (need16 && act16_.size() < size_t(m) * b16) act16_.resize(size_t(m) * b16);
    const float* xp = x.as<float>();
    const bool parallel = threads > 1 && m * k * quant_rows >= kParallelMacs;
#pragma omp parallel num_threads(threads) if (parallel)
    {
#pragma omp for schedule(static)
      for (int64_t i = 0; i < m; ++i) {
        if (need32) qk.quantize_act32(xp + i * k, reinterpret_cast<ActBlock32*>(act32_.data() + i * b32), k);
        if (need256) qk.quantize_act256(xp + i * k, reinterpret_cast<ActBlock256*>(act256_.data() + i * b256), k);
        if (need16) qk.quantize_act32_wide(xp + i * k, reinterpret_cast<ActBlock32W*>(act16_.data() + i * b16), k);
      }
#pragma omp for schedule(dynamic, 1)
      for (size_t t = 0; t < tiles.size(); ++t) {
        const Tile& tl = tiles[t];
        const CpuWeightPart& part = w.parts[tl.part];
        const auto [y, ldy] = part_output(w, outs, tl.part);
        const void* acts;
        size_t stride;
        switch (format_of(part.type)) {
          case ActFormat::q8_32: acts = act32_.data(), stride = b32; break;
          case ActFormat::q8_256: acts = act256_.data(), stride = b256; break;
          case ActFormat::q16_32: acts = act16_.data(), stride = b16; break;
          default: acts = xp, stride = size_t(k) * sizeof(float); break;
        }
        const GemmFn gemm = part.rows16                                         ? q4_k_rows16()->gemm
                            : wide && part.type == GgmlType::Q8_0               ? qk.gemm_q8_0_wide
                            : !wide && part.type == GgmlType::Q4_K && q4_k_vnni ? q4_k_vnni
                                                                                : gemm_for(qk, part.type);
        const auto [wr, ws] = tile_rows(part, tl, k);
        gemm(m, tl.rows, k, acts, stride, wr, ws, y + tl.row0, ldy);
      }
    }
  }

  add_biases(outs, biases);
}

void CpuMatmul::add_biases(std::span<const Tensor> outs, std::span<const Weight* const> biases) {
  for (size_t o = 0; o < biases.size(); ++o) {
    if (!biases[o]) continue;
    const float* b = cpu_weight(*biases[o]).values.data();
    const Tensor& y = outs[o];
    float* yp = y.as<float>();
    for (int64_t i = 0; i < y.rows; ++i)
      for (int64_t j = 0; j < y.cols; ++j) yp[i * y.cols + j] += b[j];
  }
}

// The prompt kernels (quant-kernels.h): the activation rows quantised once into the table's
// blocks, then the threads take tiles of kPromptTileRows weight rows, each repacked by the kernel
// once for all the activation rows.
constexpr int64_t kPromptTileRows = 64;
void CpuMatmul::run_prompt_kernels(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads,
                                   const PromptKernels& pk) {
  const int64_t m = x.rows, k = x.cols;
  std::vector<Tile> tiles;
  for (size_t p = 0; p < w.parts.size(); ++p)
    for (int64_t r0 = 0; r0 < w.parts[p].rows; r0 += kPromptTileRows)
      tiles.push_back({p, r0, std::min(kPromptTileRows, w.parts[p].rows - r0)});
  const size_t row = pk.act_row_bytes(k);
  if (act_prompt_.size() < size_t(m) * row) act_prompt_.resize(size_t(m) * row);
  const float* xp = x.as<float>();
#pragma omp parallel num_threads(threads)
  {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < m; ++i) pk.quantize_act(xp + i * k, act_prompt_.data() + i * row, k);
#pragma omp for schedule(dynamic, 1)
    for (size_t t = 0; t < tiles.size(); ++t) {
      const Tile& tl = tiles[t];
      const CpuWeightPart& part = w.parts[tl.part];
      const auto [y, ldy] = part_output(w, outs, tl.part);
      const GemmFn gemm = part.rows16 ? pk.gemm_q4_k_rows16 : prompt_gemm_for(pk, part.type);
      const auto [wr, ws] = tile_rows(part, tl, k);
      gemm(m, tl.rows, k, act_prompt_.data(), row, wr, ws, y + tl.row0, ldy);
    }
  }
}

// A decode step's product with a Q6_K weight that keeps wide activations (a Q4_K_M file's output
// head), where the CPU has AVX-512 VNNI: 16-bit activation blocks against the weight rows as they
// are (gemm_q6_k_wide_vnni), not rows dequantised every step. False (nothing done) otherwise.
bool CpuMatmul::run_q6_k_wide(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads) {
  const GemmFn kernel = gemm_q6_k_wide_vnni();
  if (!kernel || !prompt_kernels()) return false;  // RAGKV_PREFILL_KERNELS=f32 keeps the f32 rows too
  for (const CpuWeightPart& part : w.parts)
    if (part.type != GgmlType::Q6_K) return false;
  const int64_t m = x.rows, k = x.cols;
  const size_t b16 = act_row_bytes(ActFormat::q16_32, k);
  if (act16_.size() < size_t(m) * b16) act16_.resize(size_t(m) * b16);
  const float* xp = x.as<float>();
  const QuantKernels& qk = quant_kernels();
  for (int64_t i = 0; i < m; ++i)
    qk.quantize_act32_wide(xp + i * k, reinterpret_cast<ActBlock32W*>(act16_.data() + i * b16), k);
  std::vector<Tile> tiles;
  for (size_t p = 0; p < w.parts.size(); ++p)
    for (int64_t r0 = 0, tile = decode_tile_rows(w.parts[p].rows, w.parts[p].row_bytes, threads); r0 < w.parts[p].rows;
         r0 += tile)
      tiles.push_back({p, r0, std::min(tile, w.parts[p].rows - r0)});
  const bool parallel = threads > 1 && m * k * w.out_features >= kParallelMacs;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (parallel)
  for (size_t t = 0; t < tiles.size(); ++t) {
    const Tile& tl = tiles[t];
    const CpuWeightPart& part = w.parts[tl.part];
    const auto [y, ldy] = part_output(w, outs, tl.part);
    kernel(m, tl.rows, k, act16_.data(), b16, part.data + tl.row0 * part.row_bytes, part.row_bytes, y + tl.row0, ldy);
  }
  return true;
}

// Fewer activation rows than kDequantRowsCalls (a decode step's head on a type without wide
// kernels, such as a Q4_K or Q6_K head): each thread dequantises a few weight rows at a time
// into its own f32 tile and multiplies them by the table's f32 row kernel. SGEMM on the same
// tiles packed every weight again for one row: an 8B-shaped model's decode went from 2.45 to
// 3.01 tokens/s with its 128,256-row Q4_K head here (bench/results/README.md, 2026-11-25).
void CpuMatmul::run_dequant_rows(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads) {
  const int64_t m = x.rows, k = x.cols;
  const int64_t rows = std::clamp(kDequantRowsBytes / (k * int64_t(sizeof(float))), kDequantRowsMin, kDequantRowsMax);
  std::vector<Tile> tiles;
  for (size_t p = 0; p < w.parts.size(); ++p)
    for (int64_t r0 = 0; r0 < w.parts[p].rows; r0 += rows)
      tiles.push_back({p, r0, std::min(rows, w.parts[p].rows - r0)});
  const float* xp = x.as<float>();
  const size_t row_bytes = size_t(k) * sizeof(float);  // of x and of a tile's f32 rows
  const QuantKernels& qk = quant_kernels();
  const bool parallel = threads > 1 && m * k * w.out_features >= kParallelMacs;
  if (tile_f32_.size() < size_t(threads)) tile_f32_.resize(size_t(threads));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    std::vector<float>& wf = tile_f32_[size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (size_t t = 0; t < tiles.size(); ++t) {
      const Tile& tl = tiles[t];
      const auto [y, ldy] = part_output(w, outs, tl.part);
      const float* wt = tile_as_f32(qk, w.parts[tl.part], tl, k, wf);
      qk.gemm_f32(m, tl.rows, k, xp, row_bytes, reinterpret_cast<const uint8_t*>(wt), row_bytes, y + tl.row0, ldy);
    }
  }
}

// Each thread takes tiles of weight rows (dequant_tile_rows), dequantises one into its own f32
// buffer and multiplies every activation row with it by a single-threaded SGEMM into the tile's
// columns.
void CpuMatmul::run_dequant_gemm(const Tensor& x, const CpuWeight& w, std::span<const Tensor> outs, int threads) {
  const int64_t m = x.rows, k = x.cols;
  std::vector<Tile> tiles;
  for (size_t p = 0; p < w.parts.size(); ++p) {
    const int64_t rows = dequant_tile_rows(w.parts[p].rows, k, threads);
    for (int64_t r0 = 0; r0 < w.parts[p].rows; r0 += rows)
      tiles.push_back({p, r0, std::min(rows, w.parts[p].rows - r0)});
  }
  const float* xp = x.as<float>();
  const QuantKernels& qk = quant_kernels();
  if (tile_f32_.size() < size_t(threads)) tile_f32_.resize(size_t(threads));
#pragma omp parallel num_threads(threads)
  {
    std::vector<float>& wf = tile_f32_[size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
    for (size_t t = 0; t < tiles.size(); ++t) {
      const Tile& tl = tiles[t];
      const auto [y, ldy] = part_output(w, outs, tl.part);
      const float* wt = tile_as_f32(qk, w.parts[tl.part], tl, k, wf);
      gemm_nt(m, tl.rows, k, xp, k, wt, k, y + tl.row0, ldy, 1.f, /*rows_independent=*/true);
    }
  }
}

}  // namespace ragkv
