// `ragkv bench reuse`: time to first token of one RAG prompt in each reuse mode, side by side
// with `full` in the same run, and for each place the chunk KV can start from (RAGCache §4's
// tiers): cold on disk, in the OS page cache, in host memory, or already in the backend's
// memory (GPU memory on CUDA).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/fusor.h"

namespace ragkv {

enum class KvTier : uint8_t {
  disk,        // the chunk files' pages dropped from the page cache before each prefill
  page_cache,  // the files read before (the warm-up), so their pages are cached
  host,        // every layer read and verified into host memory before the prefill starts
  device,      // every layer already in the backend's memory (ResidentChunkKv), copied there
};
const char* kv_tier_name(KvTier t);
KvTier parse_kv_tier(const std::string& s);  // Error listing the tiers

struct ReuseBenchOptions {
  std::string model_path;
  std::string device = "cpu";
  int threads = 0;
  int chunks = 6;          // retrieved chunks in the prompt
  int chunk_tokens = 512;  // tokens per chunk (real prose, cut at a word boundary)
  std::vector<ReuseMode> modes = {ReuseMode::full, ReuseMode::prefix, ReuseMode::reuse, ReuseMode::blend};
  std::vector<KvTier> tiers = {KvTier::disk, KvTier::page_cache, KvTier::host, KvTier::device};
  BlendParams blend;
  int repetitions = 3;     // timed prefills per (mode, tier), after one warm-up
  std::string store_dir;   // where the chunk caches are precomputed; empty: a temporary store,
                           // removed at the end
};

// Precomputes the prompt's chunks into the store, then times the prefill (the TTFT: up to the
// first token's logits) per mode and tier. Reports best and median, the median's ratio to
// `full`'s, the recompute fraction, loader time and the part of it compute did not hide, and the
// first token's agreement and KL with `full`. `full` needs no store: it is timed once per run.
nlohmann::json bench_reuse(const ReuseBenchOptions& opt);

}  // namespace ragkv
